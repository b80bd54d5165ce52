"""The ``dse`` command line: thin shells over the library functions.

Bad input exits with code 2 and one line on stderr (``dse: error: FILE: KEY: ...``),
never a traceback, and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .atomic import check_writable
from . import checks
from .errors import InputError

EXIT_INPUT = 2

# The figures `dse plot` draws, in the report's order: dse.report.kinds.KINDS, named here
# so that the parser needs no plotting import (tests/test_cli.py checks they agree).
PLOT_KINDS = ("heatmap", "pareto", "roofline", "memory", "latency", "load", "frontier",
              "tiers", "tornado", "history")


def _cmd_sweep(args) -> int:
    from .results.summary import reduce_summary, sweep_summary
    from .run.sweep import sweep_to_file
    from .study.output import FORMATS
    from .study.study import load_study

    study = load_study(args.study)
    if args.output is not None:
        check_writable(args.output, "-o", None, FORMATS)
    if args.bands is not None and args.bands < 2:
        raise InputError("--bands", str(args.bands), "too few samples", "an integer >= 2")
    if args.bands and study.calibration is None:
        raise InputError(study.file, "study.calibration", "--bands needs a calibration",
                         'calibration = "calibrations/public.toml" in [study]')
    if args.workers is not None and args.workers < 1:
        raise InputError("--workers", str(args.workers), "must be at least 1",
                         "an integer >= 1 (local worker processes)")
    start = time.perf_counter()
    ds, path = sweep_to_file(study, args.output,
                             progress=False if args.quiet else args.progress,
                             scheduler=args.scheduler, workers=args.workers,
                             resume=args.resume, force=args.force)
    seconds = time.perf_counter() - start
    if args.bands:
        from .results.io import write_dataset
        from .uncertainty import bands

        band_path = Path(path).with_name(f"{Path(path).stem}-bands.nc")
        write_dataset(bands(study, samples=args.bands), band_path)
    if not args.quiet:
        if study.output.reduce is not None:
            print(reduce_summary(ds, seconds))
        elif study.size <= SUMMARY_MAX_POINTS:
            print(sweep_summary(ds, seconds))
            if (line := _disagreement(study, ds)) is not None:
                print(line)
        else:
            print(f"{study.name}: {study.size:,} points in {seconds:.3g} s "
                  f"({study.size / seconds:.3g} points/s)")
    print(f"wrote {path}" + (f", {band_path}" if args.bands else ""))
    return 0


SUMMARY_MAX_POINTS = 50_000_000  # bigger streamed grids are not read back for a summary


EXIT_INFEASIBLE = 3


def _cmd_search(args) -> int:
    from .run.progress import bar
    from .search.api import search
    from .search.files import default_output, summary, write_files
    from .study.study import load_study

    if args.n_trials is not None and args.n_trials < 1:  # 0 or -5 ran no trial, exit 3
        raise InputError("-n", None, f"value {args.n_trials} is not valid", "an integer >= 1")
    study = load_study(args.study)
    deploy = None
    if args.emit:  # -o names the directory of the launch files; the trials go inside it
        if args.top < 1:
            raise InputError("--top", None, f"value {args.top} is not valid", "an integer >= 1")
        deploy = check_writable(args.output or default_output(study).with_suffix(""), "-o",
                                None, directory=True)
        out = check_writable(deploy / "search.nc", "-o", None, (".nc",))
    elif args.output:
        out = check_writable(args.output, "-o", None, (".nc",))
    else:
        out = check_writable(default_output(study), study.file, "output.path", (".nc",))
    make = bar(args.progress, unit="trial", desc=study.name)
    total = args.n_trials or (study.search.n_trials if study.search else 0)
    trials = make(total) if make else None

    def progress(told: int) -> None:
        if trials is not None:
            trials.update(told)
        _stop_if_interrupted()

    try:
        result = search(study, out=out, n_trials=args.n_trials, progress=progress)
    finally:
        if trials is not None:
            trials.close()
    paths = write_files(result, out)
    if deploy is not None and result.best:
        from .search.emit import emit

        launch = emit(result, args.emit, deploy, args.top)
        paths["deploy"] = f"{len(launch)} {args.emit} files under {deploy}"
    if args.json:
        print(json.dumps(result.to_json(), indent=1, default=str))
    else:
        print(summary(result))
        print("wrote " + ", ".join(str(p) for p in paths.values()))
    if not result.best:
        said = " (the study's SLOs, as P99s)" if result.config.source == "slo" else ""
        print(f"dse: no feasible configuration among {result.n_trials} trials "
              f"(constraints: {', '.join(str(c) for c in result.config.constraints) or 'none'}"
              f"{said})", file=sys.stderr)
        return EXIT_INFEASIBLE
    return 0


def _cmd_sensitivity(args) -> int:
    from .results.io import write_dataset
    from .sensitivity.api import sensitivity
    from .sensitivity.report import disagreement_line, regime_text, workloads, write_report
    from .study.study import load_study
    from .run.progress import bar
    from .run.sweep import default_path

    study = load_study(args.study)
    if args.output:
        out = check_writable(args.output, "-o", None, (".nc", ".zarr"))
    else:  # beside the sweep's result, as dse search's trials are
        base = default_path(study)
        out = check_writable(base.with_name(f"{base.stem}-sensitivity.nc"), study.file,
                             "output.path", (".nc", ".zarr"))
    start = time.perf_counter()
    ds = sensitivity(study, progress=bar(False if args.quiet else args.progress,
                                         desc=study.name))
    write_dataset(ds, out)
    paths = write_report(ds, out)
    n = int(ds.sizes.get("hw_param", 0))
    points = study.size
    print(f"{study.name}: {points:,} points x {n} hardware parameters in "
          f"{time.perf_counter() - start:.3g} s")
    shown = workloads(ds)
    for label, one in shown[:3]:  # the report has every workload's
        for line in (regime_text(one), disagreement_line(one)):
            if line:
                print(f"{label}: {line}" if len(shown) > 1 else line)
    print(f"wrote {out}, " + ", ".join(str(p) for p in list(paths.values())[:2])
          + f" and {len(paths) - 2} tornado charts")
    return 0


def _disagreement(study, ds) -> str | None:
    """The one line that says where a calibrated answer is more than 2x the plain
    roofline's (dse.run.regime)."""
    from .run.regime import disagreement

    found = disagreement(study, ds)
    return None if found is None else found.line()


def _cmd_plan(args) -> int:
    from .search.plan import plan, write_plan
    from .study.study import load_study

    study = load_study(args.study)
    out = check_writable(args.output, "-o", None, (".csv",)) if args.output else None
    fleet = _assignments(args.fleet, "--fleet", "DEVICE=COUNT (devices on hand)", int)
    prices = _assignments(args.price, "--price", "DEVICE=USD (per device-hour)", float)
    result = plan(study, args.rate, args.constraint, fleet=fleet, prices=prices)
    print(result.summary(args.top))
    if out is not None:
        print(f"wrote {', '.join(str(p) for p in write_plan(result, out))}")
    if not len(result.table) and (result.mix is None or not len(result.mix)):
        within = " within the fleet" if fleet else ""
        print(f"dse: no deployment of {study.name} meets {result.objectives()} at "
              f"{args.rate:g} requests/s{within}", file=sys.stderr)
        return EXIT_INFEASIBLE
    return 0


def _assignments(items, flag: str, allowed: str, kind) -> dict | None:
    """``["h100-sxm=64", ...]`` -> {"h100-sxm": 64} (None when not given)."""
    if not items:
        return None
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            out[name.strip()] = kind(value)
        except ValueError:
            raise InputError(flag, item, "not NAME=VALUE", allowed) from None
    return out


def _cmd_report(args) -> int:
    from .report.api import report

    if args.output:
        check_writable(args.output, "-o", None, directory=True)
    print(f"wrote {report(args.result, args.output)}")
    return 0


def _cmd_plot(args) -> int:
    from .report.api import plot

    options = dict(metric=args.metric, x=args.x, y=args.y, workload=args.workload)
    if args.output:
        check_writable(args.output, "-o", None, (".png", ".svg"))
    print(f"wrote {plot(args.result, args.kind, args.output, **options)}")
    return 0


def _cmd_hardware(args) -> int:
    from .catalogue import lookup as catalogue

    cards = catalogue.all_hardware()
    if args.json:
        print(json.dumps({c.name: dict(c.fields) for c in cards}, indent=1))
        return 0
    cols = [("name", "name"), ("memory_gib", "GiB"), ("hbm_bw_gb_per_s", "GB/s"),
            ("bf16_tflops", "bf16 TF"), ("fp8_tflops", "fp8 TF"), ("fp4_tflops", "fp4 TF"),
            ("intra_node_bw_gb_per_s", "intra GB/s"), ("inter_node_bw_gb_per_s", "inter GB/s"),
            ("devices_per_node", "dev/node"), ("long_name", "description")]
    rows = [[("" if c.fields.get(k) is None else f"{c.fields[k]:g}" if isinstance(
        c.fields.get(k), (int, float)) else str(c.fields.get(k, c.name))) for k, _ in cols]
        for c in cards]
    _print_table([h for _, h in cols], rows)
    return 0


def _cmd_models(args) -> int:
    import numpy as np

    from .catalogue import lookup as catalogue
    from .formulas.params import active_params, total_params
    from .catalogue.model import stack

    cards = catalogue.all_models()
    table = stack([c.spec() for c in cards])
    total, active = np.asarray(total_params(table)), np.asarray(active_params(table))
    if args.json:
        print(json.dumps({c.name: dict(c.fields, n_params=float(n))
                          for c, n in zip(cards, total)}, indent=1))
        return 0
    rows = []
    for c, n, a in zip(cards, total, active):
        f = c.fields
        moe = f"{f['n_experts']}x top-{f['top_k']}" if c.is_moe else ""
        rows.append([c.name, f"{n / 1e9:.2f}B", f"{a / 1e9:.2f}B" if c.is_moe else "",
                     str(f["n_layers"]), str(f["d_model"]),
                     f"{f['n_heads']}/{f.get('n_kv_heads', f['n_heads'])}", moe,
                     str(f["max_seq_len"]), c.long_name])
    _print_table(["name", "params", "active", "layers", "d_model", "heads/kv", "moe",
                  "context", "description"], rows)
    return 0


def _cmd_validate(args) -> int:
    from .validate.validation import HOLDOUTS, dumps_json, validate

    out = check_writable(args.output, "-o", None, directory=True)
    rows = check_writable(args.rows, "--rows", None, suffixes=(".csv",)) if args.rows else None
    by = tuple(b.strip() for b in args.holdout_by.split(",") if b.strip())
    bad = [b for b in by if b not in HOLDOUTS]
    if bad or not by:
        raise InputError("--holdout-by", args.holdout_by, "unknown fold "
                         f"{bad[0] if bad else '(none)'}", ", ".join(HOLDOUTS))
    result = validate(args.data, calibration=args.calibration, holdout=args.holdout,
                      framework=args.framework, holdout_by=by)
    figure = result.plot(out / "validate.png")
    (out / "validate.json").write_text(dumps_json(result))
    if rows is not None:
        result.write_rows(rows)
    if args.json:
        print(dumps_json(result))
    else:
        print(result.table())
        print(f"wrote {figure}, {out / 'validate.json'}" + (f", {rows}" if rows else ""))
    return 0


def _cmd_calibrate(args) -> int:
    from .catalogue.calibration import save
    from .validate.calibrate import calibrate

    out = check_writable(args.output, "-o", None, (".toml",))
    if args.steps < 1:
        raise InputError("--steps", str(args.steps), "must be at least 1", "an integer >= 1")
    cal, history = calibrate(args.data, steps=args.steps, framework=args.framework,
                             moe_surfaces=args.moe_surfaces)
    save(cal, out)
    print(f"fitted {len(cal.frameworks)} frameworks x {len(cal.families)} families on "
          f"{cal.info['rows_fitted']} rows: loss {history[0]:.4g} -> {history[-1]:.4g} "
          f"in {len(history)} Adam steps (residual log-SD {cal.info['residual_log_sd']:.3f})")
    print(f"wrote {out}")
    return 0


def _cmd_usecases(args) -> int:
    from .catalogue.usecases import USECASES

    rows = [[name, str(i), str(o)] for name, (i, o) in USECASES.items()]
    _print_table(["usecase", "input_len", "output_len"], rows)
    return 0


def _print_table(header, rows) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def build_parser() -> argparse.ArgumentParser:
    from ._version import __version__

    parser = argparse.ArgumentParser(
        prog="dse", description="Vectorized design-space exploration for LLM systems.")
    parser.add_argument("--version", action="version", version=f"dse {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True)

    p = verbs.add_parser("sweep", help="evaluate a study's whole grid into a Dataset file")
    p.add_argument("study", help="study .toml file")
    p.add_argument("-o", "--output", help="output path (.nc or .zarr); default: [output] path")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary, no progress bar")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run the chunks on this dask "
                   "scheduler (e.g. tcp://10.0.0.1:8786); the output path must be on storage "
                   "every worker sees")
    p.add_argument("--workers", type=int, metavar="N", help="local worker processes (default: "
                   "[output] workers, \"auto\": one per core for big streamed sweeps)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted sweep from "
                   "its finished chunks (kept in .NAME.partial beside the output)")
    p.add_argument("--force", action="store_true", help="run even when the results' estimated "
                   "size exceeds the free memory or disk (checked before anything runs)")
    p.add_argument("--bands", type=int, metavar="N", help="also write NAME-bands.nc: 5/50/95%% "
                   "quantiles of the metrics over N draws of the study's calibration")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar once the work runs over a second (default: when "
                   "stderr is a terminal)")
    p.set_defaults(run=_cmd_sweep)

    p = verbs.add_parser("search", help="optuna search of a study's space ([search] section)",
                         description="Exit codes: 0 found a feasible best; 2 bad input; "
                         "3 no trial satisfied every constraint.")
    p.add_argument("study", help="study .toml file with a [search] section")
    p.add_argument("-o", "--output", help="trials Dataset (.nc), as given; CSV, best TOML and "
                   "figure go beside it (default: NAME-search.nc beside [output] path, or "
                   "results/NAME-search.nc)")
    p.add_argument("-n", "--n-trials", type=int, help="trials to add (default: [search] n_trials)")
    p.add_argument("--emit", choices=("vllm", "sglang", "trtllm", "dynamo"),
                   help="write the launch commands and config files of the best "
                   "configurations for this engine; -o is then their directory (rank-1/, "
                   "...; the trials go in it as search.nc)")
    p.add_argument("--top", type=int, default=3, help="configurations --emit writes (default 3)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar once the work runs over a second (default: when "
                   "stderr is a terminal)")
    p.set_defaults(run=_cmd_search)

    p = verbs.add_parser("plan", help="the deployments that serve a request rate at the "
                         "objectives, cheapest first (capacity planning)",
                         description="Exit codes: 0 some deployment serves the rate; 2 bad "
                         "input; 3 none does.")
    p.add_argument("study", help="study .toml file (inference; every axis but request_rate "
                   "is a choice)")
    p.add_argument("--rate", type=float, required=True, help="requests per second to serve")
    p.add_argument("--constraint", action="append", metavar="EXPR", help='an objective such '
                   'as "ttft_p99_s <= 2" (repeat; default: the study\'s [search] constraints, '
                   "else its ttft_slo_s/tpot_slo_s as P99 bounds)")
    p.add_argument("--fleet", action="append", metavar="DEVICE=COUNT", help="devices on "
                   "hand (repeat per device): plan within them and give the cheapest mix of "
                   "replicas that serves the rate")
    p.add_argument("--price", action="append", metavar="DEVICE=USD", help="price per "
                   "device-hour (repeat; default: the catalogue's)")
    p.add_argument("--top", type=int, default=10, help="rows to print (default 10)")
    p.add_argument("-o", "--output", help="write the whole table as CSV (and the mix beside "
                   "it, -mix.csv)")
    p.set_defaults(run=_cmd_plan)

    p = verbs.add_parser("sensitivity", help="elasticities of the metrics to each hardware "
                         "parameter, what-ifs, inverse questions, report ([sensitivity])")
    p.add_argument("study", help="study .toml file (a [sensitivity] section is optional)")
    p.add_argument("-o", "--output", help="Dataset path (.nc or .zarr), as given; the report "
                   "(.md, .html, PNG) goes beside it (default: NAME-sensitivity.nc beside "
                   "[output] path, which names the sweep's file, or results/NAME-sensitivity.nc)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar once the work runs over a second (default: when "
                   "stderr is a terminal)")
    p.set_defaults(run=_cmd_sensitivity)

    p = verbs.add_parser("validate", help="predict measured runs (CSV) and report the errors "
                         "per kind: calibrated, plain roofline, leave-one-out")
    p.add_argument("data", help="CSV in the schema of measured_public.csv")
    p.add_argument("--calibration", help="calibration .toml (default: the shipped "
                   "calibrations/public.toml)")
    p.add_argument("--holdout", action=argparse.BooleanOptionalAction, default=False,
                   help="also refit without each device, model and source and predict them "
                   "(one vmapped fit per fold: minutes on the public set; default: off)")
    p.add_argument("--holdout-by", default="hardware,model,source", metavar="LIST",
                   help="which leave-one-out folds --holdout runs, from hardware, model, "
                   "source (default: %(default)s)")
    p.add_argument("-o", "--output", default="results/validate",
                   help="directory for validate.png and validate.json (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    p.add_argument("--framework", help="every row as measured with this one framework (as "
                   "calibrations/generic.toml was fitted)")
    p.add_argument("--rows", metavar="OUT.csv", help="write one line per input row: id, kind, "
                   "metric, measured, predicted, ape, status (scored, or why not), note")
    p.set_defaults(run=_cmd_validate)

    p = verbs.add_parser("calibrate", help="fit a calibration to measured runs by gradient "
                         "descent through the evaluator")
    p.add_argument("data", nargs="+", help="CSVs in the schema of measured_public.csv "
                   "(serving_latency rows fit each framework's frontend)")
    p.add_argument("-o", "--output", required=True, help="calibration file to write (.toml)")
    p.add_argument("--steps", type=int, default=600, help="Adam steps (default: %(default)s)")
    p.add_argument("--framework", help="fit every row as one framework of this name (generic: "
                   "the calibration studies get by default)")
    p.add_argument("--moe-surfaces", action="store_true", help="price a device's routed "
                   "experts by the measured MoE surfaces (docs/kernels.md); studies under "
                   "the calibration do the same")
    p.set_defaults(run=_cmd_calibrate)

    p = verbs.add_parser("report", help="HTML report with figures of a sweep, search or "
                         "sensitivity result")
    p.add_argument("result", help="result file (.nc or .zarr) written by dse sweep, search "
                   "or sensitivity")
    p.add_argument("-o", "--output", help="report directory (default: <result>-report/ "
                   "beside the result); index.html and PNG figures go in it")
    p.set_defaults(run=_cmd_report)

    p = verbs.add_parser("plot", help="one figure of a result as PNG or SVG")
    p.add_argument("result", help="result file (.nc or .zarr)")
    p.add_argument("kind", help=", ".join(PLOT_KINDS))
    p.add_argument("-o", "--output", help="figure path, .png or .svg (default: "
                   "<result>-<kind>.png beside the result)")
    p.add_argument("--metric", help="variable to show (default: the mode's throughput)")
    p.add_argument("--x", help="heatmap: horizontal axis; pareto: latency variable")
    p.add_argument("--y", help="heatmap: vertical axis")
    p.add_argument("--workload", type=int, help="tornado: workload number (default 0)")
    p.set_defaults(run=_cmd_plot)

    p = verbs.add_parser("hardware", help="list the hardware catalogue")
    p.add_argument("--json", action="store_true", help="print every field as JSON")
    p.set_defaults(run=_cmd_hardware)

    p = verbs.add_parser("models", help="list the model catalogue")
    p.add_argument("--json", action="store_true", help="print every field as JSON")
    p.set_defaults(run=_cmd_models)

    p = verbs.add_parser("usecases", help="list the use-case presets (GenZ's)")
    p.set_defaults(run=_cmd_usecases)
    return parser


_INTERRUPTED = threading.Event()


def _on_interrupt(signum, frame):
    """Ctrl-C: remember it, then raise KeyboardInterrupt as Python would. A
    KeyboardInterrupt raised while a finalizer runs (a database connection returned to
    its pool) is printed and swallowed; the remembered one stops the next checkpoint."""
    _INTERRUPTED.set()
    signal.default_int_handler(signum, frame)


def _stop_if_interrupted(*_) -> None:
    """A checkpoint between batches of work (a search's trials)."""
    if _INTERRUPTED.is_set():
        raise KeyboardInterrupt


# The command-line arguments that name files, by their argparse destination and flag.
PATH_ARGUMENTS = {"study": "STUDY", "data": "DATA", "result": "RESULT", "output": "-o",
                  "calibration": "--calibration", "rows": "--rows", "emit": "--emit"}


def check_path_arguments(args) -> None:
    """The file arguments' names within the file system's limit on one name (255 bytes):
    past it every stat raises ENAMETOOLONG, wherever the name is first used."""
    for dest, flag in PATH_ARGUMENTS.items():
        values = getattr(args, dest, None)
        for value in values if isinstance(values, list) else [values]:
            if not isinstance(value, (str, os.PathLike)):
                continue
            if size := checks.long_name(value):
                raise InputError(flag, None, f"a name of {size} bytes in {str(value)[:60]!r}...",
                                 f"names of at most {checks.NAME_MAX} bytes")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb in ("sweep", "search", "plan", "sensitivity", "validate", "calibrate"):
        from .run import xla

        xla.configure()  # before anything starts JAX
        xla.enable_compilation_cache()
    _INTERRUPTED.clear()
    try:
        previous = signal.signal(signal.SIGINT, _on_interrupt)
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    try:
        check_path_arguments(args)
        code = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except InputError as err:
        print(f"dse: error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("dse: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (``dse validate ... | head``): exit quietly, as cat does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def entry() -> None:
    """The ``dse`` command (console script and ``python -m dse``): :func:`main`, then a
    quick exit.

    Tearing down XLA's and LLVM's objects at interpreter exit takes 0.3-0.4 s, a fifth of
    a small warm sweep. Once the exit handlers have run (thread pools and child processes
    joined, logs flushed, finalizers called) and the standard streams are flushed, the
    process has nothing left to save and ends at once with :func:`main`'s exit code. An
    unexpected exception still ends it the usual way, with its traceback.
    """
    code = main()
    import atexit

    run_handlers = getattr(atexit, "_run_exitfuncs", None)
    if run_handlers is None:  # not CPython: the usual exit
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    run_handlers()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
