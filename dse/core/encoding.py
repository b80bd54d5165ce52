"""Study values as evaluator input: categorical keys as indices into the spec tables,
the rest as floats of the study's dtype, and the knob pytree built from them.

Every way of feeding the evaluator goes through here: a block of the grid
(:func:`dse.run.chunks.chunk_point`), a batch of search trials (:func:`trial_point`),
a template for shape tracing (:mod:`dse.core.trace`).
"""

from __future__ import annotations

import numpy as np

from ..catalogue.usecases import USECASES
from ..schema.knobs import KV_OFFLOAD, OPTIMIZERS, PP_SCHEDULES, RECOMPUTE, ROUTING, SERVING
from .tables import numpy_dtype

INDEX_KEYS = ("model", "hardware", "draft_model", "usecase", "framework", "prefill_hardware",
              "decode_hardware")  # int32 indices


def encode(study, key: str, values) -> np.ndarray:
    """Values of study key ``key`` as evaluator input (a vector)."""
    if key in ("model", "draft_model"):
        names = [c.name for c in study.models]
        return np.asarray([names.index(v) if v is not None else 0 for v in values], np.int32)
    if key == "hardware":
        names = [c.name for c in study.hardware]
        return np.asarray([names.index(v) for v in values], np.int32)
    if key in ("prefill_hardware", "decode_hardware"):  # -1: the deployment's hardware
        names = [c.name for c in study.hardware]
        return np.asarray([names.index(v) if v is not None else -1 for v in values], np.int32)
    if key == "serving":
        return np.asarray([SERVING.index(v) for v in values], numpy_dtype(study))
    if key == "framework":  # the offset of the framework's block in the hardware table
        names = list(study.frameworks)
        return np.asarray([names.index(v if v is not None else names[0]) * len(study.hardware)
                           for v in values], np.int32)
    if key == "usecase":
        return np.asarray([list(USECASES).index(v) if v is not None else -1 for v in values],
                          np.int32)
    if key == "routing":
        return np.asarray([ROUTING.index(v) for v in values], numpy_dtype(study))
    if key == "kv_offload":
        return np.asarray([KV_OFFLOAD.index(v) for v in values], numpy_dtype(study))
    if key == "recompute":
        return np.asarray([RECOMPUTE.index(v) for v in values], numpy_dtype(study))
    if key == "pp_schedule":
        return np.asarray([PP_SCHEDULES.index(v) for v in values], numpy_dtype(study))
    if key == "optimizer":
        return np.asarray([OPTIMIZERS[v] if isinstance(v, str) else float(v) for v in values],
                          numpy_dtype(study))
    return np.asarray([float(v) for v in values], numpy_dtype(study))


def complete(study, leaves: dict, rank: int):
    """The knob pytree from the encoded ``leaves`` of some keys (arrays of rank
    ``rank``): the study's fixed keys added, and the keys other keys set (a use case
    sets input_len and output_len)."""
    leaves = dict(leaves)
    for key, value in study.fixed.items():
        leaves[key] = encode(study, key, [value]).reshape((1,) * rank)
    if "usecase" in leaves and study.values("usecase") != (None,):
        index = leaves["usecase"]
        for key, column in (("input_len", 0), ("output_len", 1)):
            table = np.asarray([u[column] for u in USECASES.values()], numpy_dtype(study))
            leaves[key] = table[index]
    return study.point_type(**leaves)


def trial_point(study, columns: dict[str, list], inner: tuple[str, ...] = ()):
    """The knob pytree for trials: ``columns`` maps each outer axis to one value per trial.

    Without ``inner`` the leaves are vectors over trials. With ``inner`` axes they are
    grids of rank 1 + len(inner): trials along axis 0, each inner axis's study values
    along its own axis (the whole inner grid evaluated for every trial).
    """
    n = len(next(iter(columns.values()))) if columns else 1
    rank = 1 + len(inner)
    leaves = {}
    for key, values in columns.items():
        leaves[key] = encode(study, key, values).reshape((n,) + (1,) * (rank - 1))
    for i, key in enumerate(inner):
        shape = [1] * rank
        shape[1 + i] = len(study.values(key))
        leaves[key] = encode(study, key, study.values(key)).reshape(shape)
    return complete(study, leaves, rank)
