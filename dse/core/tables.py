"""A study's spec tables, the evaluator's second and third arguments: one pytree per kind
whose leaves have a leading axis (one entry per model, per device), in the study's dtype.

In pipeline mode the stages, links and candidate layer splits of the ``[pipeline]``
section take the hardware table's place (:class:`PipelineSpec`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from ..catalogue import hardware as hardware_cards, kernels, model as model_cards
from ..catalogue.calibration import calibrated_spec
from ..catalogue.frameworks import FRAMEWORKS
from ..catalogue.hardware import HardwareSpec
from ..formulas.types import Links


def numpy_dtype(study):
    return np.float64 if study.dtype == "float64" else np.float32


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PipelineSpec:
    """What the evaluator receives in place of a hardware table in pipeline mode."""

    hardware: HardwareSpec  # one entry per stage
    links: Links  # one entry per link
    candidates: Any  # [C, S] layers per stage
    candidate_layers: Any  # [C] the model layer count each candidate splits


def pipeline_spec(cfg, layer_counts, dtype) -> PipelineSpec:
    """The stage, link and candidate tables of a :class:`dse.study.pipeline.PipelineConfig`."""
    cand, totals = cfg.candidates(layer_counts)
    n = len(cfg.links)

    def col(values):
        return np.asarray(values, dtype).reshape(n)

    links = Links(col([link.bw for link in cfg.links]), col([link.latency_s for link in cfg.links]),
                  col([link.overhead_s for link in cfg.links]),
                  col([link.direction for link in cfg.links]),
                  col([cfg.ratio] * n), col([cfg.compress_bytes_per_s] * n))
    return PipelineSpec(hardware_cards.stack([c.spec() for c in cfg.stages], dtype), links,
                        cand.astype(dtype), totals.astype(dtype))


def hardware_spec(study, card, framework: str = "generic") -> HardwareSpec:
    """A device's spec under the study's calibration (the plain roofline without one) and
    the serving ``framework``'s scheduling on it."""
    spec = card.spec()
    if study.calibration is not None:
        spec = calibrated_spec(spec, study.calibration, study.calibration_fit(framework),
                               card.name)
        if kernels.uses_kernels(study.calibration):
            spec = dataclasses.replace(spec, kernel_table=kernels.table_index(card.name,
                                                                              framework, card))
    return with_framework(spec, framework, card.name)


def with_framework(spec: HardwareSpec, framework: str, device: str) -> HardwareSpec:
    """``spec`` with the serving ``framework``'s scheduling and default caps on the device
    named ``device`` (dse.catalogue.frameworks)."""
    fw = FRAMEWORKS[framework]
    memory = float(spec.memory_bytes)
    return dataclasses.replace(
        spec, prefill_separate=np.float64(1.0 if fw.separate else 0.0),
        default_max_num_seqs=np.float64(fw.max_num_seqs(memory, device)),
        default_max_num_tokens=np.float64(fw.max_num_tokens(memory, device)),
        adp_balance_iters=np.float64(fw.adp_balance_iters))


def tables(study):
    """The study's (model table, hardware table) in its dtype (pipeline mode: the
    stages, links and candidate splits in place of the hardware table)."""
    dtype = numpy_dtype(study)
    models = model_cards.stack([c.spec() for c in study.models], dtype)
    if study.pipeline is not None:
        return models, pipeline_spec(study.pipeline,
                                     [c.fields["n_layers"] for c in study.models], dtype)
    # one block of devices per serving framework (the framework key is the block's offset)
    return models, kernels.stack([hardware_spec(study, c, fw) for fw in study.frameworks
                                         for c in study.hardware], dtype,
                                 moe=kernels.uses_moe(study.calibration))
