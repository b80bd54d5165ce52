"""Small helpers shared by tests: evaluate one configuration given as keyword values."""

from __future__ import annotations

from dse.study import parse_study
from dse.run.sweep import sweep


def study_text(**axes) -> str:
    lines = ["[study]", 'name = "t"', "[axes]"]
    for key, value in axes.items():
        lines.append(f"{key} = {_toml(value)}")
    return "\n".join(lines) + "\n"


def _toml(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def evaluate_point(dtype: str = "float64", **axes) -> dict[str, float]:
    """All outputs of one configuration (every key fixed), as Python floats."""
    text = study_text(**axes).replace('name = "t"', f'name = "t"\ndtype = "{dtype}"')
    ds = sweep(parse_study(text, "<test>"), progress=False)
    return {k: ds[k].item() for k in ds.data_vars}


def sweep_text(text: str):
    return sweep(parse_study(text, "<test>"), progress=False)
