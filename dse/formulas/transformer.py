"""Parts of one transformer layer, and of the model's ends, for one forward pass.

Per device of a tensor-parallel shard; the layer comes in two kinds, with a dense MLP
or with a mixture of experts (Fedus et al. 2022; Mixtral; DeepSeekMoE).

Expert parallelism (ep > 1) spreads the E routed experts of a layer over ep devices
taken from the tp x dp devices of a pipeline stage (vLLM/SGLang "EP = TP x DP",
Megatron-Core's expert-tensor-parallel when ep < tp x dp): each device holds E/ep
experts, each split over etp = tp x dp / ep devices. Tokens are dispatched to their
experts' devices and combined back with two all-to-alls, which replace the MoE
layer's tensor-parallel all-reduce. With ep = 1 every replica holds all experts,
split over its tp devices.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import comm, operators as op, params, parts
from .attention import attention_costs, indexer_costs, linear_attention_costs
from .roofline import compute_width, shaped
from .types import (PLAIN, Cost, Hints, ModelSpec, Options, Parallel, Part, Pass, Precision,
                    Rates, Shard)


def expected_distinct(population, picks_per_draw, draws):
    """Expected number of distinct items hit when each of ``draws`` picks k of n uniformly.

    One draw misses a given item with probability 1 - k/n, all T draws with
    (1 - k/n)^T, so E[distinct] = n (1 - (1 - k/n)^T). Mixtral routing (n=8, k=2):
    T=1 -> 2, T=64 -> 8 (1 - 0.75^64) = 7.99999.
    """
    safe = jnp.maximum(population, 1.0)
    return population * (1.0 - (1.0 - picks_per_draw / safe) ** draws)


def expert_layout(m: ModelSpec, par: Parallel):
    """(experts per device, expert-tensor-parallel width, replicas per EP group).

    Under expert parallelism an EPLB layout (SGLang ``--ep-num-redundant-experts``, vLLM
    ``--num-redundant-experts``, TensorRT-LLM's ``num_slots``) holds ``par.redundant``
    copies of the busiest experts beside the routed ones: (E + R) / ep physical experts
    per device."""
    etp = jnp.where(par.ep > 1.0, par.tp * par.dp / par.ep, par.tp)
    return physical_experts(m, par) / par.ep, etp, par.ep * etp / par.tp


def physical_experts(m: ModelSpec, par: Parallel):
    """Routed experts held over an EP group, redundant copies included (E without EP)."""
    return m.n_experts + jnp.where(par.ep > 1.0, par.redundant, 0.0)


def _mlp(m: ModelSpec, rows, ff, weight_sets, p: Precision, bias, width=None):
    """gate/up projection, activation function, down projection (on tokens of ``width``,
    d_model unless given: LatentMoE's routed experts)."""
    w, a = p.weight_bits, p.act_bits
    d = m.d_model if width is None else width
    up_width = (m.mlp_matrices - 1.0) * ff
    if weight_sets is None:
        up = op.matmul(rows, d, up_width, w, a, bias)
        down = op.matmul(rows, ff, d, w, a, bias)
    else:
        up = op.grouped_matmul(rows, d, up_width, weight_sets, w, a)
        down = op.grouped_matmul(rows, ff, d, weight_sets, w, a)
    return [up, op.elementwise(rows * ff, m.mlp_matrices - 1.0, 1.0, a, 4.0), down]


def _attention_parts(fixed: dict[str, Part], costs, rates, ps: Pass, windowed: bool,
                     window, hints: Hints) -> dict[str, Part]:
    """Attention parts of a layer with full attention, or with the model's window: the
    fixed costs' parts (priced with the layer's other matmuls) and the varying ones'."""
    out = dict(fixed)
    for name, fns in costs.varying.items():
        if ps.phase == "decode":
            varying = [parts.mean_of(f, rates, ps.lo, ps.hi, window, hints) for f in fns]
        elif windowed:
            # a window makes chunk costs non-affine in the chunk index: take the middle chunk
            varying = [parts.of(f((ps.lo + ps.hi) / 2.0), rates) for f in fns]
        else:
            varying = [parts.mean_of(f, rates, ps.lo, ps.hi, 0.0, hints) for f in fns]
        out[name] = parts.add(out.get(name, parts.ZERO), *varying)
    return out


def fp8_rates(rates: Rates, p: Precision) -> Rates:
    """``rates`` with the attention unit at its FP8 rate, for DSA's indexer, which scores in
    FP8 whatever the cache's precision. The unit's rate is that of max(act, kv) bits;
    tensor-core peaks double per halving of the width (catalogue: H100/H200 989 -> 1979,
    B200 2250 -> 4500 TFLOPS at 16 -> 8 bits), so FP8 is width / 8 times it (4 to 16
    bits; a 32-bit cache is taken as 16)."""
    width = jnp.clip(compute_width(jnp.maximum(p.act_bits, p.kv_bits)), 4.0, 16.0)
    return rates._replace(attention_flops_per_s=rates.attention_flops_per_s * width / 8.0)


def _lora(m: ModelSpec, s: Shard, p: Precision, ps: Pass, o: Options, with_mlp: bool):
    """Batched LoRA (Punica SGMV / S-LoRA): every projection adapted, rank r, fp16 adapters.

    A token through an adapted [d_in, d_out] matrix costs 2 r (d_in + d_out) FLOPs; the
    distinct adapters in use (of ``lora_adapters``, each sequence using one uniformly)
    are read once per pass.
    """
    hd = m.head_dim
    dims = (2.0 * (m.d_model + s.heads * hd) + 2.0 * (m.d_model + s.kv_heads * hd))
    if with_mlp:  # the MLPs of the mean dense layer (params.dense_mlp_share)
        dims = dims + params.dense_mlp_share(m) * m.mlp_matrices * (m.d_model + s.ff)
    hit = expected_distinct(o.lora_adapters, 1.0, ps.seqs)
    flops = 2.0 * ps.tokens * o.lora_rank * dims
    bytes_ = hit * o.lora_rank * dims * 2.0 + ps.tokens * dims * p.act_bits / 8.0
    return Cost(flops, jnp.where(o.lora_rank > 0.0, bytes_, 0.0), "gemm")


def layer_parts(m: ModelSpec, s: Shard, p: Precision, ps: Pass, rates: Rates, par: Parallel,
                o: Options, features: frozenset, hints: Hints = PLAIN) -> tuple[dict, dict]:
    """(dense-MLP layer, MoE layer): parts of one layer per device."""
    t, d, a = ps.tokens, m.d_model, p.act_bits
    mla = "mla" in features
    sparse = mla and "sparse" in features  # DSA: a lightning indexer and a top-k cap
    flat, rates = rates, shaped(rates, t)  # every dense matmul of the layer has t rows
    # the layer's operators by group, priced together (parts.priced: one surface lookup)
    # the full-attention layers at their own shapes where they have them (Gemma 4)
    full = attention_costs(*params.global_view(m, s), p, ps, 0.0, o.flash, mla, sparse)
    groups = {("full", n): [(c, rates) for c in cs] for n, cs in full.fixed.items()}
    if sparse:
        index = indexer_costs(m, p, ps)
        groups.update({("index", n): [(c, rates) for c in cs] for n, cs in index.fixed.items()})
    if "window" in features:
        windowed = attention_costs(m, s, p, ps, m.sliding_window, o.flash, mla)
        groups.update({("window", n): [(c, rates) for c in cs]
                       for n, cs in windowed.fixed.items()})
    if "linear" in features:  # hybrid: linear attention on that share of the layers
        linear_costs = linear_attention_costs(m, s, p, ps)
        groups.update({("linear", n): [(c, rates) for c in cs] for n, cs in linear_costs.items()})
    groups["norms"] = [(op.elementwise(params.layer_norms(m) * t * d, 1.0, 1.0, a, 4.0),
                        rates)]
    groups["mlp"] = [(c, rates) for c in _mlp(m, t, s.ff, None, p, m.linear_bias)]
    if "lora" in features:
        groups["lora"] = [(_lora(m, s, p, ps, o, True), rates)]
    moe_features = "moe" in features
    if moe_features:
        local, etp, group = expert_layout(m, par)
        # Under expert parallelism the device holding the busiest expert (moe_imbalance x
        # the mean tokens, the rest of its experts at the mean) sets the step: its rows are
        # 1 + (imbalance - 1) / (experts per device) times the mean device's.
        skew = jnp.where(par.ep > 1.0, 1.0 + (o.moe_imbalance - 1.0) / jnp.maximum(local, 1.0),
                         1.0)
        rows = t * group * m.top_k / par.ep * skew
        # each routed token lands on k of the E + R physical experts (a copy takes its
        # share of its expert's tokens)
        slots = jnp.maximum(physical_experts(m, par), 1.0)
        hit = local * (1.0 - (1.0 - m.top_k / slots) ** (t * group))
        width = params.expert_width(m)  # d_model, or LatentMoE's latent
        routed = _mlp(m, rows, m.d_ff_expert / etp, hit, p, 0.0, width)
        # The routed experts run as one grouped kernel whose measured efficiency (the MoE
        # surface) is read at the device's rows per expert in use, the experts in use side
        # by side and the hidden size (dse.catalogue.kernel_build.moe_shape); the kernel
        # measured includes the activation between its two GEMMs. The grouped shapes stay
        # behind for the GEMM surface where no MoE surface is shipped.
        used = jnp.maximum(hit, 1.0)
        moe_shape = (rows / used, used * m.d_ff_expert / etp, width)
        up, act, down = routed
        if flat.moe_surface is not None:
            inside = flat.kernel_table >= 0.0
            act = act._replace(flops=jnp.where(inside, 0.0, act.flops),
                               bytes=jnp.where(inside, 0.0, act.bytes))
        routed = [up._replace(shape=moe_shape + up.shape, surface="moe"), act,
                  down._replace(shape=moe_shape + down.shape, surface="moe")]
        expert_rates = shaped(flat, rows / jnp.maximum(hit, 1.0))  # rows per expert in use
        has_shared = m.n_shared_experts > 0.0
        shared = [c._replace(flops=jnp.where(has_shared, c.flops, 0.0),
                             bytes=jnp.where(has_shared, c.bytes, 0.0))
                  for c in _mlp(m, t, m.n_shared_experts * s.ff_expert, None, p, 0.0)]
        router = op.matmul(t, d, m.n_experts, p.weight_bits, a)
        # LatentMoE: every token down to the latent before dispatch and back after the
        # combine, whole on each tensor-parallel device (vLLM, TensorRT-LLM replicate them)
        latent = m.moe_latent_size > 0.0
        latent_width = jnp.maximum(m.moe_latent_size, 1.0)  # a shape the surfaces can read
        projections = [c._replace(flops=jnp.where(latent, c.flops, 0.0),
                                  bytes=jnp.where(latent, c.bytes, 0.0))
                       for c in (op.matmul(t, d, latent_width, p.weight_bits, a),
                                 op.matmul(t, latent_width, d, p.weight_bits, a))]
        groups["moe"] = ([(c, rates) for c in [router] + shared + projections]
                         + [(c, expert_rates) for c in routed])
        if "lora" in features:
            groups["moe_lora"] = [(_lora(m, s, p, ps, o, False), rates)]
    done = parts.priced(groups)

    def fixed(kind, costs):
        return {n: done[(kind, n)] for n in costs.fixed}

    attn = _attention_parts(fixed("full", full), full, rates, ps, False, 0.0, hints)
    if sparse:
        # DSA's top-k caps the keys of a query as a window does (chunk costs non-affine in
        # the chunk index); the rest of the layer is priced as dense MLA's, and models
        # without an indexer keep every part above, bit for bit
        core = full._replace(varying={"attention": full.varying["attention"]})
        top = _attention_parts({}, core, rates, ps, True, m.index_topk, hints)["attention"]
        attn["attention"] = parts.where(m.index_topk > 0.0, top, attn["attention"])
        indexer = _attention_parts(fixed("index", index), index, fp8_rates(rates, p), ps,
                                   False, 0.0, hints)
        # IndexShare (GLM-5.2): the other layers reuse the last indexer's top-k
        indexer = {n: parts.scale(v, m.index_layer_fraction) for n, v in indexer.items()}
        attn = {n: parts.add(attn.get(n, parts.ZERO), indexer[n]) if n in indexer else attn[n]
                for n in dict.fromkeys([*attn, *indexer])}
    if "window" in features:
        f = m.sliding_window_layers
        attn = parts.combine([(1.0 - f, attn), (f, _attention_parts(
            fixed("window", windowed), windowed, rates, ps, True, m.sliding_window, hints))])
    if "linear" in features:
        f = params.linear_fraction(m)
        linear = {n: done[("linear", n)] for n in linear_costs}
        attn = parts.combine([(1.0 - f, attn), (f, linear)])
    common = dict(attn)
    common["norms"] = done["norms"]
    common["overhead"] = parts.overhead(rates.layer_overhead_s)
    reduce = parts.comm(comm.all_reduce_s(t * d * a / 8.0, par.tp, rates))

    # a dense layer's MLP, averaged over the dense layers (Nemotron-H's attention blocks
    # have none, and one all-reduce: after the mixer, as each MLP block has its own)
    share = params.dense_mlp_share(m)
    dense = dict(common, tp_comm=parts.scale(reduce, 1.0 + share),
                 mlp=parts.scale(done["mlp"], share))
    if "lora" in features:
        dense["lora"] = done["lora"]
    if not moe_features:
        return dense, {}
    moe = dict(common, moe=done["moe"],
               tp_comm=parts.scale(reduce, jnp.where(par.ep > 1.0, 1.0, 2.0)),
               ep_comm=parts.comm(2.0 * comm.all_to_all_s(rows * width * a / 8.0, par.ep,
                                                          rates)))
    if "lora" in features:
        moe["lora"] = done["moe_lora"]
    return dense, moe


def end_parts(m: ModelSpec, s: Shard, p: Precision, ps: Pass, rates: Rates, tp
              ) -> tuple[dict, dict]:
    """(first stage: embedding, last stage: final norm, LM head, logits gather) per pass.

    Serving engines compute logits only where a token is sampled (vLLM, TensorRT-LLM):
    once per sequence per pass, and the vocab-parallel logits are gathered over tp.
    """
    t, a = ps.tokens, p.act_bits
    first = {"embedding": parts.of(op.elementwise(t * m.d_model, 1.0, 1.0, a, 0.0), rates)}
    last = {"norms": parts.of(op.elementwise(t * m.d_model, 1.0, 1.0, a, 4.0), rates),
            "lm_head": parts.of(op.matmul(ps.seqs, m.d_model, s.vocab, p.weight_bits, a),
                            shaped(rates, ps.seqs)),
            "tp_comm": parts.comm(comm.all_gather_s(ps.seqs * m.vocab_size * a / 8.0, tp, rates))}
    return first, last
