"""The installed aiconfigurator-core's measured serving runs (``systems/silicon_sample.csv``):
where they are, and the one-line error of a command that cannot find them (shared by the
silicon converter and the launch-script reader)."""

from __future__ import annotations

import sys
from pathlib import Path


def package_csv() -> tuple[Path, str]:
    """The installed aiconfigurator-core's silicon_sample.csv and the package version."""
    from importlib.metadata import PackageNotFoundError, version
    from importlib.resources import files
    try:
        path = Path(str(files("aiconfigurator_core") / "systems" / "silicon_sample.csv"))
        return path, version("aiconfigurator-core")
    except (ImportError, PackageNotFoundError) as e:
        print(f"dse: error: aiconfigurator-core is not installed ({e}): pip install "
              "'dse[silicon]', or pass --csv PATH --version V", file=sys.stderr)
        raise SystemExit(2) from None


def missing_upstream(src) -> int:
    """The one-line error of a command whose upstream silicon_sample.csv is not there."""
    print(f"dse: error: {src}: file not found (the upstream silicon_sample.csv)",
          file=sys.stderr)
    return 2
