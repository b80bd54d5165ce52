"""Read a study file into a validated :class:`Study`: the one input boundary of dse.

Every section (``[study]``, ``[axes]``, ``[output]`` with ``[output.reduce]``,
``[search]``, ``[sensitivity]``, ``[pipeline]``, the calibration it names) is parsed and
checked here, when the study is loaded, whichever verb runs it. Everything a study can
get wrong is reported as an :class:`~dse.errors.InputError` naming the file, the key, the
value and what is allowed; past this point the evaluator never raises.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from .. import checks
from ..catalogue import calibration as calibration_files
from ..catalogue.hardware import HardwareCard
from ..catalogue.lookup import input_path, load_hardware, load_model, roots
from ..catalogue.model import ModelCard, model_features
from ..errors import InputError
from ..schema import knobs
from ..schema.outputs import OUTPUTS
from .axes import parse_axis
from .output import Output, parse_output
from .pipeline import parse_pipeline
from .search import SearchConfig, parse_search, with_slo_constraints
from .sensitivity import SensitivityConfig, parse_sensitivity

SECTIONS = ("study", "axes", "output", "search", "sensitivity", "pipeline")
POOL_HARDWARE = ("prefill_hardware", "decode_hardware")
STUDY_KEYS = ("name", "mode", "description", "dtype", "calibration", "framework")
DTYPES = ("float32", "float64")


@dataclasses.dataclass(frozen=True)
class Axis:
    """One dimension of the result: a study key and its values, in file order."""

    name: str
    values: tuple
    spec: object = None  # the study's own value: a list, or a range table


@dataclasses.dataclass(frozen=True)
class Study:
    """A validated study: its axes (dimensions), fixed values and resolved catalogue."""

    name: str
    mode: str
    text: str
    file: str
    dims: tuple[Axis, ...]
    fixed: dict[str, Any]
    models: tuple[ModelCard, ...]  # table order: the model axis indexes into this
    hardware: tuple[HardwareCard, ...]
    output: Output
    dtype: str = "float32"
    sections: dict[str, Any] = dataclasses.field(default_factory=dict)
    pipeline: Any = None  # PipelineConfig in pipeline mode
    calibration: Any = None  # dse.catalogue.calibration.Calibration ([study] calibration)
    framework: str | None = None  # the calibration's framework this study runs on
    search: SearchConfig | None = None  # the [search] section, if any
    sensitivity: SensitivityConfig | None = None  # the [sensitivity] section, if any

    @property
    def frameworks(self) -> tuple[str, ...]:
        """The serving frameworks of the study (inference): [axes] framework, or the one
        [study] framework names, or "generic"; the hardware table has one block of
        devices per framework, in this order."""
        if self.mode != "inference":
            return ("generic",)
        given = tuple(v for v in self.values("framework") if v is not None)
        if given:
            return given
        if self.framework is not None:
            from ..catalogue.frameworks import ALIASES, FRAMEWORKS

            name = ALIASES.get(self.framework, self.framework)
            return (name if name in FRAMEWORKS else "generic",)
        return ("generic",)

    def calibration_fit(self, framework: str) -> str | None:
        """The calibration framework (fit) a serving framework runs under (None: the plain
        roofline)."""
        if self.calibration is None:
            return None
        if self.framework is not None:  # [study] framework: that fit for everything
            return self.framework
        from ..catalogue.frameworks import FRAMEWORKS, calibration_name

        fit = calibration_name(FRAMEWORKS[framework], self.calibration.frameworks)
        return fit if fit is not None else self.calibration.frameworks[0]

    @property
    def under_load(self) -> bool:
        """Some point of the study serves a request load (concurrency or request_rate, or
        agentic sessions: sessions or session_rate)."""
        return self.mode == "inference" and any(
            v > 0 for k in ("concurrency", "request_rate", *SESSION_LOADS)
            for v in self.values(k))

    @property
    def has_sessions(self) -> bool:
        """The study's load is agentic sessions (sessions or session_rate)."""
        return self.mode == "inference" and any(
            v > 0 for k in SESSION_LOADS for v in self.values(k))

    @property
    def evaluation_width(self) -> int:
        """Evaluations per grid point (pipeline mode: one per candidate split)."""
        if self.pipeline is None:
            return 1
        return sum(self.pipeline.count(n) for n in
                   {c.fields["n_layers"] for c in self.models})

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.dims)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def point_type(self):
        return knobs.POINT_TYPES[self.mode]

    @property
    def features(self) -> frozenset:
        """Model and serving features this study uses (static switches of the evaluator)."""
        out = set(model_features(self.models))
        if self.mode == "inference":
            if any(v > 0 for v in self.values("lora_rank")):
                out.add("lora")
            if any(v > 0 for v in self.values("draft_len")):
                out.add("speculative")
            if any(v > 0 for v in self.values("image_tokens")):
                out.add("vision")
            if self.under_load:
                out.add("load")
                if self.has_sessions:
                    out.add("sessions")
                    if "random" in self.values("routing"):
                        out.add("sessions_random")
                if any(v > 0 for v in self.values("spec_tokens")):
                    out.add("mtp")
            if "disagg" in self.values("serving") or any(  # (or derived from such a study)
                    self.values(k) != (knobs.fields(self.point_type)[k].default,)
                    for k in POOL_KEYS):
                out.add("disagg")
        if self.mode == "training" and (  # uneven pipeline stages or a schedule not 1F1B
                any(v != "1f1b" for v in self.values("pp_schedule"))
                or any(v > 0 for k in ("first_stage_layers", "last_stage_layers")
                       for v in self.values(k))):
            out.add("pp_layout")
        if self.output.breakdown:
            out.add("breakdown")
        if self.pipeline is not None:
            out.add("objective:" + self.pipeline.objective)
        return frozenset(out)

    @property
    def variables(self) -> tuple[str, ...]:
        """The outputs this study writes."""
        return self.output.variables or OUTPUTS[self.mode].defaults(self.features)

    def values(self, key: str) -> tuple:
        """All values a key takes in this study (one for a fixed key)."""
        for axis in self.dims:
            if axis.name == key:
                return axis.values
        return (self.fixed[key],)

    def with_axes(self, **overrides) -> "Study":
        """A copy with some keys replaced (a list makes an axis, a scalar fixes the key)."""
        return self._reparsed(dict(self.sections), overrides)

    def at(self, **values) -> "Study":
        """The study at chosen values (scalars fix keys, lists make axes), for evaluating
        those points: the analysis sections, which refer to the axes (``[search]``,
        ``[sensitivity]``, ``[output.reduce]``), are dropped."""
        sections = {k: v for k, v in self.sections.items() if k not in ("search", "sensitivity")}
        if isinstance(sections.get("output"), dict):
            sections["output"] = {k: v for k, v in sections["output"].items() if k != "reduce"}
        return self._reparsed(sections, values)

    def _reparsed(self, sections: dict, overrides: dict) -> "Study":
        raw = dict(sections.get("axes", {}))
        raw.update(overrides)
        return parse_study_dict(dict(sections, axes=raw), self.text, self.file,
                                base_dir=Path(self.file).parent, derived=True)

    def sensitivity_config(self) -> SensitivityConfig:
        """The ``[sensitivity]`` section, or its defaults for this study."""
        if self.sensitivity is not None:
            return self.sensitivity
        return parse_sensitivity({}, self.file, self.mode,
                                 {a.name: a.values for a in self.dims})


def load_study(path: str | Path) -> Study:
    """Read and validate a study file."""
    path = Path(path)
    try:
        text = checks.read_text(path, kind="a study TOML")
    except FileNotFoundError:
        raise InputError(path, None, "study file not found") from None
    except OSError as err:  # a directory, a file it may not read
        raise InputError(path, None, f"cannot read the study file: {err.strerror or err}") from None
    return parse_study(text, str(path), base_dir=path.parent)


def parse_study(text: str, file: str = "<study>", base_dir: Path | None = None) -> Study:
    """Validate study TOML ``text`` (``file`` names it in errors)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(file, None, f"not valid TOML: {err}") from None
    return parse_study_dict(raw, text, file, base_dir)


def parse_study_dict(raw: dict, text: str, file: str, base_dir: Path | None = None,
                     derived: bool = False) -> Study:
    checks.known_keys({f"[{k}]": None for k in raw}, [f"[{s}]" for s in SECTIONS], file,
                      what="section")
    head = checks.table(raw.get("study", {}), file, "study", "a [study] section")
    checks.known_keys(head, STUDY_KEYS, file, "study")
    mode = checks.choice(head, "mode", "inference", knobs.MODES, file, "study")
    dtype = checks.choice(head, "dtype", "float32", DTYPES, file, "study")
    name = checks.string(head, "name", Path(file).stem, file, "study")

    point_type = knobs.POINT_TYPES[mode]
    fields = knobs.fields(point_type)
    axes_raw = checks.table(raw.get("axes", {}), file, "axes", "a [axes] section")
    checks.known_keys(axes_raw, fields, file, "axes", f"key for mode {mode!r}")
    for key in ("model", "hardware"):
        if key in fields and key not in axes_raw:
            raise InputError(file, f"axes.{key}", "missing", knobs.KINDS[key])

    if mode == "pipeline" and "pipeline" not in raw:
        raise InputError(file, "[pipeline]", "missing", "a [pipeline] section with stages")
    if mode != "pipeline" and "pipeline" in raw:
        raise InputError(file, "[pipeline]", f"applies to mode \"pipeline\", not {mode!r}",
                         'study.mode = "pipeline"')
    if "usecase" in axes_raw:
        for key in ("input_len", "output_len"):
            if key in axes_raw:
                raise InputError(file, f"axes.{key}", "conflicts with axes.usecase, which "
                                 "sets both lengths", "either usecase or input_len/output_len")
    dims: list[Axis] = []
    fixed: dict[str, Any] = {}
    for key, field in fields.items():
        kind = field.metadata["kind"]
        if key in axes_raw:
            is_axis, values = parse_axis(axes_raw[key], kind, file, f"axes.{key}")
        else:
            is_axis, values = False, [field.default]
        if is_axis:
            dims.append(Axis(key, tuple(values), axes_raw[key]))
        else:
            fixed[key] = values[0]
    order = list(axes_raw)
    dims.sort(key=lambda a: order.index(a.name))
    if "dp" in axes_raw and "num_devices" in axes_raw:
        given = next((a.values for a in dims if a.name == "num_devices"),
                     (fixed.get("num_devices"),))
        if any(v != 0 for v in given):
            raise InputError(file, "axes.dp", "given with axes.num_devices, from which dp is "
                             "derived (num_devices / (tp pp))", "either dp or num_devices")

    def values_of(key):
        return next((a.values for a in dims if a.name == key), (fixed.get(key),))

    def resolve(key, loader):
        names = [n for n in dict.fromkeys(values_of(key)) if n is not None]
        return {n: loader(n, referrer=file, key=f"axes.{key}", base_dir=base_dir) for n in names}

    model_cards = resolve("model", load_model)
    if mode in ("inference", "pipeline"):
        _checkpoint_defaults(model_cards, fields, axes_raw, fixed, file)
    hardware_cards = resolve("hardware", load_hardware) if "hardware" in fields else {}
    draft_cards = resolve("draft_model", load_model) if "draft_model" in fields else {}
    pool_cards = {key: resolve(key, load_hardware) for key in POOL_HARDWARE if key in fields}
    labels = {"model": model_cards, "hardware": hardware_cards, "draft_model": draft_cards,
              **pool_cards}
    for key, cards in list(labels.items())[:3]:
        names = [c.name for c in cards.values()]
        if len(set(names)) != len(names):
            raise InputError(file, f"axes.{key}", "two entries resolve to the same name",
                             "distinct models/hardware")
    # Axis labels are catalogue names (a path resolves to its card's name).
    dims = [Axis(a.name, tuple(labels[a.name][v].name for v in a.values), a.spec)
            if a.name in labels else a for a in dims]
    for key, cards in labels.items():
        if key in fixed and fixed[key] is not None:
            fixed[key] = cards[fixed[key]].name
    if "draft_len" in fields:
        if any(v > 0 for v in values_of("draft_len")) and not draft_cards:
            raise InputError(file, "axes.draft_len", "speculative decoding needs a draft model",
                             "axes.draft_model = a model name, or draft_len = 0")
    table = {c.name: c for c in list(model_cards.values()) + list(draft_cards.values())}

    pipeline = None
    # the hardware table: the deployments' devices, then the pools' others
    table_hw = {c.name: c for c in hardware_cards.values()}
    for cards in pool_cards.values():
        for c in cards.values():
            table_hw.setdefault(c.name, c)
    hardware = tuple(table_hw.values())
    if mode == "pipeline":
        pipeline = parse_pipeline(raw["pipeline"], file, base_dir,
                                  {c.name: c.fields["n_layers"] for c in model_cards.values()})
        hardware = pipeline.stages  # the stage table, in stage order
    serving = tuple(v for v in values_of("framework") if v is not None) if (
        "framework" in fields) else ()
    if serving and "framework" in head:
        raise InputError(file, "axes.framework", "given with study.framework",
                         "the framework in one place: [axes] framework (serving, any number) "
                         "or [study] framework (the calibration's)")
    calibration, framework = _parse_calibration(head, file, base_dir, mode, bool(serving))
    axis_names = tuple(a.name for a in dims)
    search = (parse_search(raw["search"], file, mode, name, axis_names)
              if "search" in raw else None)
    sensitivity = (parse_sensitivity(raw["sensitivity"], file, mode,
                                     {a.name: a.values for a in dims})
                   if "sensitivity" in raw else None)
    study = Study(name=name, mode=mode, text=text, file=file, dims=tuple(dims), fixed=fixed,
                  models=tuple(table.values()), hardware=hardware,
                  output=parse_output(raw, file, mode, axis_names), dtype=dtype,
                  sections=dict(raw), pipeline=pipeline, calibration=calibration,
                  framework=framework, search=search, sensitivity=sensitivity)
    if mode == "inference" and "vision" in study.features:
        without = [c.name for c in study.models if not c.fields.get("vision_layers")]
        if without:
            raise InputError(file, "axes.image_tokens", f"model {without[0]!r} has no vision "
                             "encoder dse prices", "0, or a vision-language model (Qwen3-VL, "
                             "Qwen3.5, Qwen3.6: its card lists vision_layers)")
    if search is not None and "load" in study.features:  # SLOs: the default constraints
        study = dataclasses.replace(study, search=with_slo_constraints(
            search, study.values, file, mode))
    _check_contradictions(study)
    study = _check_sessions(study, axes_raw)
    return _check_load(_check_disagg(study, axes_raw, derived), axes_raw)


def _checkpoint_defaults(cards: dict, fields, axes_raw: dict, fixed: dict, file) -> None:
    """A quantized checkpoint's precision (its card's ``checkpoints``, keyed by the name
    the study wrote or the card's own) is the default of weight_bits and kv_bits where
    the study states neither; models whose checkpoints differ need the study to state it."""
    from ..catalogue.lookup import normalized

    for key in ("weight_bits", "kv_bits"):
        if key not in fields or key in axes_raw:
            continue
        found = {}
        for written, card in cards.items():
            table = {normalized(k): v for k, v in card.fields.get("checkpoints", {}).items()}
            bits = (table.get(normalized(written)) or table.get(normalized(card.name)) or {})
            found[written] = bits.get(key)
        stated = {v for v in found.values()}
        if stated == {None}:
            continue
        if len(stated) > 1:
            said = ", ".join(f"{w}: {v or fields[key].default}" for w, v in found.items())
            raise InputError(file, f"axes.{key}", f"not given, and the models' checkpoints "
                             f"differ ({said})", f"axes.{key} stated for all of them")
        fixed[key] = stated.pop()


# What a study runs under when it names no calibration: the shipped fit of every public
# measurement pooled under one framework, or, when it names a framework, the per-framework
# fit (docs/validation.md). ``calibration = "none"`` is the plain roofline, an upper bound.
DEFAULT_CALIBRATION = "calibrations/generic.toml"
FRAMEWORK_CALIBRATION = "calibrations/public.toml"
NO_CALIBRATION = "none"


def _parse_calibration(head: dict, file: str, base_dir: Path | None, mode: str,
                       serving: bool = False):
    """([study] calibration, framework): the fitted efficiencies the study runs under
    (None, None: the plain roofline). ``serving``: the study names serving frameworks in
    [axes], each of which runs under its fit in the calibration (the default calibration's
    one fit unless the study names a per-framework file, e.g. calibrations/public.toml)."""
    path, framework = head.get("calibration"), head.get("framework")
    if serving and path != NO_CALIBRATION:
        path = path if path is not None else DEFAULT_CALIBRATION
        if not isinstance(path, str) or not path:
            raise checks.invalid(file, "study.calibration", path,
                                 'a path to a calibration .toml, or "none" (the plain roofline)')
        resolved = input_path(path, base_dir, roots())
        return calibration_files.load(resolved, referrer=file, key="study.calibration"), None
    if path == NO_CALIBRATION:
        if framework is not None:
            raise InputError(file, "study.framework", 'given with calibration = "none"',
                             "no framework, or a calibration file")
        return None, None
    if mode == "pipeline":
        if path is None and framework is None:  # no calibration data for such pipelines
            return None, None
        raise InputError(file, "study.calibration", "not supported in pipeline mode",
                         'inference or training studies; calibration = "none"')
    if path is None:
        path = FRAMEWORK_CALIBRATION if framework is not None else DEFAULT_CALIBRATION
    if not isinstance(path, str) or not path:
        raise checks.invalid(file, "study.calibration", path,
                             'a path to a calibration .toml, or "none" (the plain roofline)')
    resolved = input_path(path, base_dir, roots())
    cal = calibration_files.load(resolved, referrer=file, key="study.calibration")
    if framework is None:
        if len(cal.frameworks) != 1:
            raise InputError(file, "study.framework", "missing (the calibration has several)",
                             ", ".join(cal.frameworks))
        framework = cal.frameworks[0]
    if framework not in cal.frameworks:
        raise InputError(file, "study.framework", f"value {framework!r} is not in the "
                         "calibration", ", ".join(cal.frameworks))
    return cal, framework


def _check_contradictions(study: Study) -> None:
    """A key whose every value is structurally impossible for some model is bad input.

    A grid in which *some* combinations are indivisible is fine (those points are
    marked with a reason); a study where a model can never run is a contradiction.
    """
    file = study.file
    if study.mode == "pipeline":
        return
    tps, pps = study.values("tp"), study.values("pp")
    for card in study.models:
        if not any(card.divisors_ok(tp) for tp in tps):
            f = card.fields
            raise InputError(file, "axes.tp", f"tp = {_show(tps)} cannot shard {card.name} "
                             f"({f['n_heads']} heads, {f.get('n_kv_heads', f['n_heads'])} kv heads)",
                             "a tp that divides the heads (kv heads may be replicated)")
        if all(pp > card.fields["n_layers"] for pp in pps):
            raise InputError(file, "axes.pp", f"pp = {_show(pps)} exceeds the "
                             f"{card.fields['n_layers']} layers of {card.name}",
                             f"1..{card.fields['n_layers']}")
    eps = study.values("ep")
    copies = study.values("ep_redundant_experts") if study.mode == "inference" else (0,)
    if all(ep > 1 for ep in eps):
        targets = set(study.values("model"))
        for card in (c for c in study.models if c.name in targets):
            experts = card.fields.get("n_experts", 0)
            if experts and not any((experts + r) % ep == 0 for ep in eps for r in copies):
                raise InputError(file, "axes.ep", f"ep = {_show(eps)} cannot split the "
                                 f"{experts} experts of {card.name}"
                                 + (f" (with {_show(copies)} redundant)" if any(copies)
                                    else ""),
                                 "1, or a divisor of the MoE model's experts (plus "
                                 "ep_redundant_experts)")


def _requested(study: Study) -> list[tuple[str, str]]:
    """(study key, output) of every output the study names: the variables it lists (not
    ``"all"``), its search's objectives and constrained variables."""
    wanted = [("output.variables", n) for n in (study.output.variables or ())
              if study.sections.get("output", {}).get("variables") != "all"]
    if study.search is not None:
        wanted += [("search.objective", n) for n in study.search.objectives]
        wanted += [("search.constraints", c.variable) for c in study.search.constraints]
    return wanted


SESSION_LOADS = ("sessions", "session_rate")
SESSION_KEYS = ("turns", "turns_cv", "turn_input_len", "shared_prefix_len", "think_time_s",
                "kv_offload", "kv_dram_bytes", "kv_dram_bw_bytes_per_s", "kv_ssd_bytes",
                "kv_ssd_bw_bytes_per_s", "kv_ssd_latency_s", "kv_dram_usd_per_gb_h",
                "kv_ssd_usd_per_gb_h", "routing", "replicas")


def _check_sessions(study: Study, axes_raw: dict) -> Study:
    """Agentic-session keys that contradict the study or each other; returns the study
    (``variables = "all"`` keeps only what it has)."""
    if study.mode != "inference":
        return study
    file = study.file
    stated = [k for k in SESSION_KEYS if k in axes_raw]
    loads = {k: [v for v in study.values(k) if v > 0] for k in SESSION_LOADS}
    if not any(loads.values()):
        if stated:
            raise InputError(file, f"axes.{stated[0]}", "describes agentic sessions, and the "
                             "study has no session load", "axes.sessions > 0 (concurrent "
                             "sessions) or axes.session_rate > 0 (sessions/s)")
        for key, name in _requested(study):
            if OUTPUTS["inference"].get(name) is not None and OUTPUTS["inference"][
                    name].feature == "sessions":
                raise InputError(file, key, f"{name!r} describes agentic sessions, and the "
                                 "study has none", "axes.sessions or axes.session_rate > 0")
        if study.output.variables and study.sections.get("output", {}).get(
                "variables") == "all":
            only = {n for n, o in OUTPUTS["inference"].items() if o.feature == "sessions"}
            kept = tuple(v for v in study.output.variables if v not in only)
            return dataclasses.replace(study, output=dataclasses.replace(study.output,
                                                                         variables=kept))
        return study
    if all(loads.values()):
        raise InputError(file, "axes.session_rate", "given with axes.sessions",
                         "one session load: sessions (concurrent, closed) or session_rate "
                         "(sessions/s, open)")
    key = "sessions" if loads["sessions"] else "session_rate"
    if any(v <= 0 for v in study.values(key)):
        raise InputError(file, f"axes.{key}", "0 at some points: session keys with a static "
                         "batch", f"{key} > 0 at every point of a session study")
    for other in ("concurrency", "request_rate", "batch", "prefix_cache_hit"):
        if other in axes_raw:
            raise InputError(file, f"axes.{other}", "given with a session load (the sessions "
                             "set the requests, their batch and their prefix-cache hits)",
                             f"no axes.{other} beside axes.{key}")
    if "disagg" in study.values("serving"):
        raise InputError(file, "axes.serving", "disaggregated serving of agentic sessions is "
                         "not modelled", '"agg"')
    if "replicas" in axes_raw and ("dp" in axes_raw or "num_devices" in axes_raw):
        raise InputError(file, "axes.replicas", "given with axes.dp or axes.num_devices",
                         "the replicas in one place: replicas, dp or num_devices")
    for tier in ("dram", "ssd"):
        size, bw = study.values(f"kv_{tier}_bytes"), study.values(f"kv_{tier}_bw_bytes_per_s")
        if any(v > 0 for v in size) and any(v <= 0 for v in bw):
            raise InputError(file, f"axes.kv_{tier}_bw_bytes_per_s", f"0 where the {tier.upper()} "
                             "tier has bytes: a tier without bandwidth",
                             f"kv_{tier}_bw_bytes_per_s > 0 (bytes/s) wherever kv_{tier}_bytes > 0")
        if any(v > 0 for v in size) and "none" in study.values("kv_offload"):
            raise InputError(file, "axes.kv_offload", f'"none" with a {tier.upper()} tier '
                             "(nothing would be written to it)", '"prompt" or "all", or no '
                             f"kv_{tier}_bytes")
    return study


POOLS = ("prefill", "decode")
POOL_KEYS = tuple(f"{pool}_{k}" for pool in POOLS for k in (
    "workers", "tp", "pp", "dp", "ep", "moe_tp", "batch", "hardware")) + ("kv_transfer_overlap",)


def _check_disagg(study: Study, axes_raw: dict, derived: bool = False) -> Study:
    """Disaggregated-serving keys that contradict the study; returns the study
    (``variables = "all"`` keeps only what it has). A study derived from a checked one
    (some of its points, e.g. a batch of search trials all aggregated) is not checked."""
    if study.mode != "inference" or derived:
        return study
    file = study.file
    only = {n for n, o in OUTPUTS["inference"].items() if o.feature == "disagg"}
    if "disagg" not in study.values("serving"):
        for key in POOL_KEYS:
            if key in axes_raw:
                raise InputError(file, f"axes.{key}", "applies to disaggregated serving, and "
                                 "the study has none", 'axes.serving = "disagg" (or a list '
                                 'with it), or no prefill_/decode_ keys')
        for key, name in _requested(study):
            if name in only:
                raise InputError(file, key, f"{name!r} describes disaggregated serving, and "
                                 "the study has none", 'axes.serving = "disagg"')
        if study.output.variables and study.sections.get("output", {}).get(
                "variables") == "all":
            kept = tuple(v for v in study.output.variables if v not in only)
            return dataclasses.replace(study, output=dataclasses.replace(study.output,
                                                                         variables=kept))
        return study
    key = "concurrency" if any(v > 0 for v in study.values("concurrency")) else "request_rate"
    if any(v <= 0 for v in study.values(key)):
        named = f"axes.{key}" if study.under_load else "axes.serving"
        raise InputError(file, named, '"disagg" needs a request load at every point',
                         "axes.request_rate > 0 (requests/s to the deployment) or "
                         "axes.concurrency > 0 (closed-loop clients)")
    if study.output.breakdown:
        raise InputError(file, "output.breakdown", "is not drawn for disaggregated serving",
                         'breakdown = false, or serving = "agg"')
    for pool in POOLS:
        layout = {k: study.values(f"{pool}_{k}") for k in ("tp", "dp", "ep", "moe_tp")}
        if all(len(v) == 1 for v in layout.values()):
            tp, dp, ep, moe_tp = (layout[k][0] for k in ("tp", "dp", "ep", "moe_tp"))
            tp = tp or (study.values("tp")[0] if len(study.values("tp")) == 1 else 0)
            ep = ep or (study.values("ep")[0] if len(study.values("ep")) == 1 else 0)
            dp = dp or 1
            if moe_tp and tp and ep and moe_tp * ep != tp * dp:
                raise InputError(file, f"axes.{pool}_moe_tp", f"{moe_tp} x {pool}_ep {ep} is "
                                 f"not {pool}_tp {tp} x {pool}_dp {dp}", "devices per worker "
                                 "= tp x dp = moe_tp x ep (moe_tp 0: derived)")
    return study


def _check_load(study: Study, axes_raw: dict) -> Study:
    """Serving-under-load keys that contradict each other, or outputs of a load the study
    does not have; returns the study (``variables = "all"`` keeps only what it has)."""
    if study.mode != "inference":
        return study
    file = study.file
    closed = [v for v in study.values("concurrency") if v > 0]
    rate = [v for v in study.values("request_rate") if v > 0]
    if closed and rate:
        raise InputError(file, "axes.request_rate", "given with axes.concurrency",
                         "one load: concurrency (closed-loop clients) or request_rate "
                         "(open-loop requests/s)")
    load_only = {n for n, o in OUTPUTS["inference"].items() if o.feature == "load"}
    _check_run(study, closed)
    if study.under_load:
        key = "concurrency" if closed else "request_rate"
        if study.has_sessions:  # (a session study has its load at every point: checked)
            key = "sessions" if any(v > 0 for v in study.values("sessions")) else "session_rate"
        static = any(v == 0 for v in study.values(key))  # points with no load: batch applies
        if "batch" in axes_raw and not static:
            raise InputError(file, "axes.batch", "has no effect under a request load (the "
                             "running batch follows from the load: output running_batch)",
                             "no axes.batch; cap the running batch with axes.max_num_seqs")
        if any(v > 0 for v in study.values("draft_len")):
            raise InputError(file, "axes.draft_len", "a draft model under a request load is "
                             "not modelled", "spec_tokens (the model's own draft layer: "
                             "MTP, EAGLE) with concurrency or request_rate, or draft_len "
                             "with a static batch (no load keys)")
        _check_spec(study, static)
        return study
    if any(v > 0 for v in study.values("spec_tokens")):
        raise InputError(file, "axes.spec_tokens", "is speculative decoding under a request "
                         "load, and the study has none", "axes.concurrency or "
                         "axes.request_rate > 0; a static batch speculates with draft_model "
                         "and draft_len")
    for key, name in _requested(study):
        if name in load_only:
            raise InputError(file, key, f"{name!r} describes serving under a request load, "
                             "and the study has none", "axes.concurrency or "
                             "axes.request_rate > 0")
    for key in ("ttft_slo_s", "tpot_slo_s"):
        if any(v > 0 for v in study.values(key)):
            raise InputError(file, f"axes.{key}", "an objective for goodput needs a request "
                             "load", "axes.concurrency or axes.request_rate > 0")
    if study.output.variables and study.sections.get("output", {}).get("variables") == "all":
        kept = tuple(v for v in study.output.variables if v not in load_only)
        return dataclasses.replace(study, output=dataclasses.replace(study.output,
                                                                     variables=kept))
    return study


def _check_run(study: Study, closed: list) -> None:
    """num_prompts (a benchmark run of that many requests) applies to closed loops of
    clients, at least one request per client, and not to agentic sessions."""
    runs = [v for v in study.values("num_prompts") if v > 0]
    if not runs:
        return
    if study.has_sessions:
        raise InputError(study.file, "axes.num_prompts", "applies to a closed loop of "
                         "benchmark clients, and the study runs agentic sessions",
                         "num_prompts = 0 with sessions or session_rate")
    if not closed or any(v <= 0 for v in study.values("concurrency")):
        raise InputError(study.file, "axes.num_prompts", "is a closed-loop benchmark run's "
                         "requests, and the study has points without clients",
                         "axes.concurrency > 0 at every point, or num_prompts = 0")
    if min(runs) < max(closed):
        raise InputError(study.file, "axes.num_prompts", f"{min(runs):g} requests for "
                         f"{max(closed):g} clients", "at least axes.concurrency (each client "
                         "sends one request or more; 0: the steady state)")


def _check_spec(study: Study, static: bool) -> None:
    """spec_tokens and spec_acceptance of a study under load: no static points beside
    them, and at most spec_tokens + 1 tokens accepted per step at every point."""
    drafts = [v for v in study.values("spec_tokens") if v > 0]
    if not drafts:
        return
    if static:
        raise InputError(study.file, "axes.spec_tokens", "applies under a request load, and "
                         "the study has points without one", "concurrency or request_rate "
                         "> 0 at every point, or spec_tokens = 0")
    accepted = max(study.values("spec_acceptance"))
    if accepted > min(drafts) + 1:
        raise InputError(study.file, "axes.spec_acceptance", f"{accepted:g} tokens per step "
                         f"with spec_tokens = {min(drafts)}", "at most spec_tokens + 1 (the "
                         "drafts and the verified token; 0: from acceptance_rate)")


def _show(values) -> str:
    return str(values[0]) if len(values) == 1 else str(list(values))
