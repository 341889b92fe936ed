"""What a run recomputes in the backward, as Megatron-Core sets it, and which layers do.

Megatron-Core's knobs (``RunSpec`` fields of the same names):

* ``recompute_granularity``: ``selective`` (the ``recompute_modules`` of every layer) or ``full``
  (whole layers: only their input is stored);
* ``recompute_modules`` (selective): ``core_attn`` (the attention core), ``layernorm`` (the
  normalisations), ``mla_up_proj`` (MLA's up-projections), ``mlp`` (a dense MLP), ``moe_act``
  (the routed experts' activation), ``moe`` (the whole MoE block), ``shared_experts``;
* ``recompute_method`` (full): ``uniform`` (every layer, checkpointed in groups of
  ``recompute_num_layers``: one stored input per group) or ``block`` (the first
  ``recompute_num_layers`` layers of each stage; the others recompute nothing).

``memory_policy`` names recipes of these: ``none`` (nothing), ``selective`` (``core_attn``),
``full`` (uniform, groups of one) and ``deepseek-v3`` (``layernorm``, ``mla_up_proj``,
``moe_act``, with DeepSeek's FP8 and E5M6 caches: :mod:`sim.training.model.activations`); explicit
``recompute_*`` fields replace the recipe's recomputation. What each module saves and reruns:
:data:`MODULE_TENSORS` (activations) and :data:`MODULE_KERNELS` (the forward kernels run again,
:mod:`sim.compute.ops` names). A recomputed MoE block does not send its all-to-alls again (not
modelled).

``selective-op`` is not Megatron's: it is torchtitan's per-op selective activation checkpointing
(``selective_ac_option = 'op'``, ``torchtitan/parallelisms/parallelize_llama.py``): every layer is
checkpointed, and of the ops it runs the outputs of the attention core and of every other matrix
multiply are saved (the 1st, 3rd, 5th and 7th of a Llama layer's wq, wk, wv, wo, w1, w3, w2),
everything else recomputed in the backward (granularity ``op``). The kernels rerun
(:func:`kernel_shares_rerun`): the normalisations, RoPE, the SwiGLU and the residual adds whole, and
of the GEMMs wk (its share of the fused QKV kernel), wo, and w3 (half of the fused w1-w3 kernel). It
is modelled for dense GQA layers without tensor parallelism (:func:`check_op_policy`).
"""
from __future__ import annotations

from typing import NamedTuple

from ...checks import SpecError

MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "moe", "shared_experts")
GRANULARITIES = ("selective", "full")
METHODS = ("uniform", "block")
POLICY_RECIPES = {"none": (None, ()), "selective": ("selective", ("core_attn",)), "full": ("full", ()),
                  "deepseek-v3": ("selective", ("layernorm", "mla_up_proj", "moe_act")),
                  "selective-op": ("op", ())}
CORE_KERNELS = ("attn_core", "attn_scores", "attn_softmax", "attn_dropout", "attn_values")
# The forward kernels each module runs again before its backward, by block.
MODULE_KERNELS = {
    "core_attn": {"attn": CORE_KERNELS},
    "layernorm": {"attn": ("norm", "q_norm", "kv_norm"), "mlp": ("norm",)},
    "mla_up_proj": {"attn": ("q_up", "kv_up", "rope")},
    "mlp": {"mlp": ("fc1", "fc.swiglu", "fc.gelu")},
    "moe_act": {"mlp": ("experts.swiglu",)},
    "moe": {"mlp": ("router", "router_topk", "dispatch.cast", "permute", "experts1", "experts.swiglu", "experts2",
                    "unpermute", "shared1", "shared.swiglu", "shared2")},
    "shared_experts": {"mlp": ("shared1", "shared.swiglu")},
}
# The saved tensors (sim.training.model.activations names) each module's recomputation frees.
MODULE_TENSORS = {
    "core_attn": ("attn.softmax", "attn.softmax_dropout_mask", "attn.softmax_dropout", "attn.logsumexp"),
    "layernorm": ("attn.qkv_input", "attn.down_input", "attn.q_up_input", "attn.kv_up_input", "mlp.input"),
    "mla_up_proj": ("attn.q", "attn.k", "attn.v"),
    "mlp": ("mlp.gelu_input", "mlp.down_input", "mlp.swiglu_input"),
    "moe_act": ("routed.down_input",),
    "moe": ("router.scores", "router.topk_weights", "router.topk_indices", "routed.input", "routed.swiglu_input",
            "routed.down_input", "shared.swiglu_input", "shared.down_input"),
    "shared_experts": ("shared.swiglu_input", "shared.down_input"),
}


class Recompute(NamedTuple):
    """A run's recomputation: ``granularity`` (``None``: none), the selective ``modules``, and for
    full recomputation ``method`` and ``num_layers``."""

    granularity: str | None
    modules: tuple = ()
    method: str = "uniform"
    num_layers: int = 1

    def full_layers(self, count: int) -> list[bool]:
        """Which of a stage's ``count`` layers store only their input (full recomputation)."""
        if self.granularity != "full":
            return [False] * count
        if self.method == "block":
            return [i < self.num_layers for i in range(count)]
        return [True] * count

    def stored_inputs(self, count: int) -> float:
        """Layer inputs a stage of ``count`` fully recomputed layers keeps per micro-batch: one per
        group of ``num_layers`` (uniform), one per layer (block)."""
        full = sum(self.full_layers(count))
        if self.method == "uniform" and self.granularity == "full":
            return -(-count // self.num_layers)
        return full

    @property
    def label(self) -> str:
        if self.granularity is None:
            return "no recomputation"
        if self.granularity == "op":
            return "selective recomputation of every op but the attention core and every other GEMM (torchtitan's)"
        if self.granularity == "full":
            return f"full recomputation ({self.method}, {self.num_layers} layer{'s' if self.num_layers > 1 else ''})"
        return f"selective recomputation of {', '.join(self.modules)}"


def recompute_of(run) -> Recompute:
    """The run's :class:`Recompute`: its explicit ``recompute_*`` fields, else its memory policy's."""
    if run.recompute_granularity is None and run.recompute_modules is None:
        granularity, modules = POLICY_RECIPES[run.memory_policy]
        return Recompute(granularity, tuple(modules))
    granularity = run.recompute_granularity or "selective"
    if granularity == "full":
        return Recompute("full", (), run.recompute_method or "uniform", run.recompute_num_layers or 1)
    return Recompute("selective", tuple(run.recompute_modules or ("core_attn",)))


def check_recompute(run) -> None:
    """One line per bad combination of the ``recompute_*`` fields of ``run`` (a
    :class:`~sim.training.model.specs.RunSpec`, which calls this as it is made) naming the values and what is
    allowed."""
    g, modules, method, n = (run.recompute_granularity, run.recompute_modules, run.recompute_method,
                             run.recompute_num_layers)
    if g is not None and g not in GRANULARITIES:
        raise SpecError(f"RunSpec.recompute_granularity must be one of {', '.join(GRANULARITIES)}, got {g!r}")
    if modules is not None:
        bad = [x for x in modules if x not in MODULES]
        if isinstance(modules, str) or bad:
            raise SpecError(f"RunSpec.recompute_modules: unknown module(s) {bad or [modules]}; allowed: "
                            f"{', '.join(MODULES)}")
        if g == "full":
            raise SpecError("RunSpec.recompute_modules applies to recompute_granularity selective, not full")
    if method is not None and method not in METHODS:
        raise SpecError(f"RunSpec.recompute_method must be one of {', '.join(METHODS)}, got {method!r}")
    if (method is not None or n is not None) and g != "full":
        raise SpecError("RunSpec.recompute_method and recompute_num_layers apply to recompute_granularity full, got "
                        f"recompute_granularity {g!r}")


def check_layers(rc: Recompute, layers_per_stage: list[int]) -> None:
    """``recompute_num_layers`` may not exceed a stage's layers (Megatron refuses it too)."""
    if rc.granularity == "full" and rc.num_layers > min(layers_per_stage):
        raise SpecError(f"RunSpec.recompute_num_layers ({rc.num_layers}) is above the {min(layers_per_stage)} layers "
                        f"of the smallest stage (layers per stage: {layers_per_stage}); allowed: 1 to "
                        f"{min(layers_per_stage)}")


def kernels_rerun(rc: Recompute, block: str) -> set[str]:
    """The forward kernels of ``block`` (``attn`` or ``mlp``) a selectively recomputed layer reruns."""
    return {k for module in rc.modules for k in MODULE_KERNELS[module].get(block, ())}


OP_POLICY_KERNELS = {"attn": ("norm", "rope", "out_proj", "dropout", "residual"),
                     "mlp": ("norm", "fc.swiglu", "dropout", "residual")}


def kernel_shares_rerun(rc: Recompute, block: str, model) -> dict[str, float]:
    """The forward kernels of ``block`` a selectively recomputed layer reruns, each with the share
    of it that runs again: 1 for every module's kernel (:func:`kernels_rerun`); under the ``op``
    granularity the kernels of :data:`OP_POLICY_KERNELS` whole, and of the fused GEMMs the share
    of wk in QKV (``kv_heads / (heads + 2 kv_heads)``) and of w3 in w1-w3 (1/2)."""
    if rc.granularity != "op":
        return dict.fromkeys(kernels_rerun(rc, block), 1.0)
    shares = dict.fromkeys(OP_POLICY_KERNELS[block], 1.0)
    if block == "attn":
        kv = model.kv_heads or model.heads
        shares["qkv"] = kv / (model.heads + 2 * kv)
    else:
        shares["fc1"] = 0.5
    return shares


def check_op_policy(rc: Recompute, model, run) -> None:
    """torchtitan's per-op policy is modelled for dense GQA layers with SwiGLU, a fused attention
    core (whose outputs it saves) and no TP: one line otherwise."""
    if rc.granularity != "op":
        return
    if model.is_moe or model.attention != "gqa" or model.mlp_activation != "swiglu" or run.tp != 1 or \
            run.attention_kernel == "unfused":
        raise SpecError(f"memory_policy selective-op (torchtitan's per-op checkpointing) is modelled for dense "
                        f"GQA models with SwiGLU and a fused attention core at tp 1, got {model.name} (attention "
                        f"{model.attention}, {'MoE' if model.is_moe else 'dense'}, {model.mlp_activation}, "
                        f"attention_kernel {run.attention_kernel}) at tp {run.tp}; allowed: selective, full or "
                        "Megatron's recompute_* fields")


def tensors_freed(rc: Recompute) -> set[str]:
    """The saved tensors a selectively recomputed layer does not keep."""
    return {t for module in rc.modules for t in MODULE_TENSORS[module]}


__all__ = ["CORE_KERNELS", "GRANULARITIES", "METHODS", "MODULES", "MODULE_KERNELS", "MODULE_TENSORS",
           "OP_POLICY_KERNELS", "POLICY_RECIPES", "Recompute", "check_layers", "check_op_policy", "check_recompute",
           "kernel_shares_rerun", "kernels_rerun", "recompute_of", "tensors_freed"]
