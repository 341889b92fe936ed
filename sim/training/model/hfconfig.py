"""A model from its Hugging Face ``config.json``: the shapes the chunk model costs, read field by
field, every missing or unusable field named in one line (:class:`ModelConfigError`).
:func:`config_fields` gives the fields of a :class:`~sim.training.model.specs.ModelSpec`; the spec itself is
made (and checked as a whole) by :func:`sim.training.model.specs.model_from_config`.

Supported ``model_type`` values and the fields read (other fields are ignored):

==================================  ========================================================================
model_type                          fields
==================================  ========================================================================
all                                 ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
                                    ``vocab_size``; ``num_key_value_heads`` (default: the heads),
                                    ``head_dim`` (default: hidden / heads)
``llama``, ``mistral``, ``qwen2``,  dense SwiGLU FFN of ``intermediate_size``
``qwen3``
``mixtral``                         ``num_local_experts`` routed experts of ``intermediate_size``,
                                    ``num_experts_per_tok``
``qwen2_moe``, ``qwen3_moe``        ``num_experts`` of ``moe_intermediate_size``, ``num_experts_per_tok``;
                                    ``mlp_only_layers`` (dense layers: must be the first k, with
                                    ``intermediate_size``), ``decoder_sparse_step`` (must be 1);
                                    ``qwen2_moe``: ``shared_expert_intermediate_size`` (a whole
                                    multiple of the expert size: that many shared experts)
``deepseek_v2``, ``deepseek_v3``    MLA: ``kv_lora_rank``, ``q_lora_rank`` (null: no query compression),
                                    ``qk_nope_head_dim`` (= ``v_head_dim``), ``qk_rope_head_dim``;
                                    ``n_routed_experts``, ``n_shared_experts``, ``num_experts_per_tok``,
                                    ``moe_intermediate_size``, ``first_k_dense_replace`` dense layers of
                                    ``intermediate_size``, ``moe_layer_freq`` (must be 1),
                                    ``num_nextn_predict_layers`` (MTP modules, default 0)
``gpt_oss``                         ``num_local_experts`` of ``intermediate_size``, ``num_experts_per_tok``
``gpt2``                            ``n_embd``, ``n_layer``, ``n_head``, ``n_inner`` (null: 4 x n_embd),
                                    ``vocab_size``; a GELU FFN; dropout when any ``*_pdrop`` > 0
==================================  ========================================================================

What a model has that the chunk model does not cost is kept in ``ModelSpec.not_costed`` and named in
every run's output: sliding-window attention (``sliding_window`` with ``layer_types``, or on every
layer), attention sinks (``gpt_oss``), and any ``layer_types`` entry other than full or sliding
attention (linear attention, costed as full causal attention). A ``model_type`` outside the table
(state-space, encoder-decoder, ...) is refused: the chunk model cannot cost it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ...checks import InputError, number

DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss")
MODEL_TYPES = DENSE_TYPES + MOE_TYPES + ("gpt2",)
MAX_SIZE = 10_000_000


class ModelConfigError(InputError):
    """A ``config.json`` that is not JSON, lacks a field, has a size out of range or names an
    architecture the chunk model cannot cost."""


def read_config(path: str | Path) -> dict:
    """The JSON object of ``path``, or a :class:`ModelConfigError` naming the file and what is wrong."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ModelConfigError(f"{path}: not a text file (it is not UTF-8)") from None
    except OSError as exc:
        raise ModelConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    if not isinstance(config, dict):
        raise ModelConfigError(f"{path}: expected a JSON object of model fields, got {type(config).__name__}")
    return config


def model_name(path: str | Path) -> str:
    """A model's name from its file: the folder of a ``config.json`` (``Qwen3-30B-A3B/config.json``
    -> ``Qwen3-30B-A3B``), else the file's stem."""
    path = Path(path)
    return path.parent.name or path.stem if path.name == "config.json" else path.stem




class _Fields:
    """Reads the fields of one config, each refusal naming the file and the field; remembers the
    fields it read and the defaults it assumed (:class:`ConfigReading`)."""

    def __init__(self, config: dict, where: str):
        self.config, self.where = config, where
        self.read: list[str] = []
        self.assumed: dict[str, str] = {}

    def get(self, field: str):
        """The raw value of ``field`` (``None`` when absent), noted as read when present."""
        value = self.config.get(field)
        if value is not None and field not in self.read:
            self.read.append(field)
        return value

    def assume(self, field: str, value, why: str = "") -> None:
        self.assumed[field] = f"{value}{f' ({why})' if why else ''}"

    def size(self, field: str, default=None, low: int = 1) -> int:
        """A whole number >= ``low`` (``default`` when the field is absent or null, if given)."""
        value = self.get(field)
        if value is None:
            if default is not None:
                self.assume(field, default)
                return default
            kind = self.config.get("model_type")
            raise ModelConfigError(f"{self.where}: field {field!r} is missing; the chunk model needs it for "
                                   f"model_type {kind!r}")
        return number(value, f"{self.where}: {field}", integer=True, low=low, high=MAX_SIZE, error=ModelConfigError)

    def rate(self, field: str) -> float:
        value = self.get(field)
        return 0.0 if value is None else number(value, f"{self.where}: {field}", low=0, high=1,
                                                error=ModelConfigError)


@dataclass(frozen=True)
class ConfigReading:
    """What was made of one config: the :class:`~sim.training.model.specs.ModelSpec` ``fields``, the config
    fields ``read``, the defaults ``assumed`` (field -> value used) and the fields ``ignored``."""
    fields: dict
    read: tuple
    assumed: dict
    ignored: tuple

    def summary(self, where: str) -> str:
        """One line: ``<where>: read 9 fields (...); assumed ...; ignored 17 (...)``."""
        assumed = "; assumed " + ", ".join(f"{k} = {v}" for k, v in self.assumed.items()) if self.assumed else ""
        ignored = f"; ignored {len(self.ignored)} ({', '.join(self.ignored)})" if self.ignored else "; ignored none"
        return f"{where}: read {len(self.read)} fields ({', '.join(self.read)}){assumed}{ignored}"


def read_fields(config: dict, where: str) -> ConfigReading:
    """The :class:`~sim.training.model.specs.ModelSpec` fields (all but ``name`` and ``source``) of a Hugging
    Face config (a dict; see the module's table) and what was read, assumed and ignored; ``where``
    names it in every refusal."""
    f = _Fields(config, where)
    fields_ = _spec_fields(f, config, where)
    ignored = tuple(sorted(k for k in config if k not in f.read))
    return ConfigReading(fields_, tuple(f.read), dict(f.assumed), ignored)


def config_fields(config: dict, where: str) -> dict:
    """The :class:`~sim.training.model.specs.ModelSpec` fields of a Hugging Face config (:func:`read_fields`)."""
    return read_fields(config, where).fields


def _spec_fields(f: _Fields, config: dict, where: str) -> dict:
    kind = f.get("model_type")
    if kind not in MODEL_TYPES:
        raise ModelConfigError(f"{where}: model_type {kind!r} is not one the chunk model can cost; supported: "
                               f"{', '.join(MODEL_TYPES)}")
    if kind == "gpt2":
        return _gpt2(f, where)
    heads = f.size("num_attention_heads")
    hidden = f.size("hidden_size")
    spec = dict(layers=f.size("num_hidden_layers"), hidden=hidden, heads=heads, vocab=f.size("vocab_size"))
    spec["kv_heads"] = f.size("num_key_value_heads", heads)
    if "num_key_value_heads" in f.assumed:
        f.assume("num_key_value_heads", heads, "the attention heads: no grouped-query attention")
    if kind in ("deepseek_v2", "deepseek_v3"):
        pass                                        # MLA: the head sizes are its own fields
    elif f.get("head_dim") is not None:
        spec["head_dim"] = f.size("head_dim")
    elif hidden % heads:
        raise ModelConfigError(f"{where}: no head_dim, and hidden_size {hidden} is not a multiple of "
                               f"num_attention_heads {heads}: give head_dim")
    else:
        spec["head_dim"] = hidden // heads
        f.assume("head_dim", hidden // heads, "hidden_size / num_attention_heads")
    if kind in DENSE_TYPES:
        spec.update(dense_layers=spec["layers"], dense_intermediate=f.size("intermediate_size"))
    elif kind in ("mixtral", "gpt_oss"):
        spec.update(routed_experts=f.size("num_local_experts"), topk=f.size("num_experts_per_tok"),
                    expert_intermediate=f.size("intermediate_size"))
    elif kind in ("qwen2_moe", "qwen3_moe"):
        spec.update(_qwen_moe(f, config, kind, spec["layers"]))
    else:
        spec.update(_deepseek(f, config))
        spec.pop("kv_heads")                        # MLA: keys and values come from the latent
    return {**spec, "not_costed": _not_costed(f, config, kind, spec["layers"])}


def _qwen_moe(f: _Fields, config: dict, kind: str, layers: int) -> dict:
    if f.size("decoder_sparse_step", 1) != 1:
        raise ModelConfigError(f"{f.where}: decoder_sparse_step {config['decoder_sparse_step']} (an MoE layer every "
                               "few layers) cannot be costed: the chunk model has dense layers only before the MoE "
                               "layers; allowed: 1")
    dense = f.get("mlp_only_layers") or []
    if not isinstance(dense, list) or sorted(dense) != list(range(len(dense))):
        raise ModelConfigError(f"{f.where}: mlp_only_layers {dense!r} cannot be costed: the chunk model has dense "
                               "layers only before the MoE layers (allowed: [0, 1, ..., k-1])")
    out = dict(routed_experts=f.size("num_experts"), topk=f.size("num_experts_per_tok"),
               expert_intermediate=f.size("moe_intermediate_size"), dense_layers=len(dense))
    if dense:
        out["dense_intermediate"] = f.size("intermediate_size")
    if kind == "qwen2_moe":
        shared = f.size("shared_expert_intermediate_size", 0, low=0)
        if shared % out["expert_intermediate"]:
            raise ModelConfigError(f"{f.where}: shared_expert_intermediate_size {shared} is not a whole multiple of "
                                   f"moe_intermediate_size {out['expert_intermediate']}: the chunk model costs shared "
                                   "experts of the routed experts' size")
        out["shared_experts"] = shared // out["expert_intermediate"]
    if layers <= len(dense):
        raise ModelConfigError(f"{f.where}: mlp_only_layers covers every layer; use a dense model_type")
    return out


def _deepseek(f: _Fields, config: dict) -> dict:
    nope, v = f.size("qk_nope_head_dim"), f.size("v_head_dim")
    if nope != v:
        raise ModelConfigError(f"{f.where}: qk_nope_head_dim {nope} differs from v_head_dim {v}; the chunk model "
                               "costs one head size for keys and values")
    if f.size("moe_layer_freq", 1) != 1:
        raise ModelConfigError(f"{f.where}: moe_layer_freq {config['moe_layer_freq']} cannot be costed: the chunk "
                               "model has dense layers only before the MoE layers; allowed: 1")
    dense = f.size("first_k_dense_replace", 0, low=0)
    out = dict(attention="mla", head_dim=nope, rope_dim=f.size("qk_rope_head_dim"),
               kv_lora_rank=f.size("kv_lora_rank"), q_lora_rank=f.size("q_lora_rank", 0, low=0),
               routed_experts=f.size("n_routed_experts"), shared_experts=f.size("n_shared_experts", 0, low=0),
               topk=f.size("num_experts_per_tok"), expert_intermediate=f.size("moe_intermediate_size"),
               dense_layers=dense, mtp_modules=f.size("num_nextn_predict_layers", 0, low=0))
    if dense:
        out["dense_intermediate"] = f.size("intermediate_size")
    return out


def _gpt2(f: _Fields, where: str) -> dict:
    hidden, heads = f.size("n_embd"), f.size("n_head")
    if hidden % heads:
        raise ModelConfigError(f"{where}: n_embd {hidden} is not a multiple of n_head {heads}")
    layers = f.size("n_layer")
    dropout = any(f.rate(k) > 0 for k in ("resid_pdrop", "attn_pdrop", "embd_pdrop"))
    return dict(layers=layers, hidden=hidden, heads=heads, head_dim=hidden // heads, vocab=f.size("vocab_size"),
                dense_layers=layers, dense_intermediate=f.size("n_inner", 4 * hidden), mlp_activation="gelu",
                dropout=dropout)


def _not_costed(f: _Fields, config: dict, kind: str, layers: int) -> tuple:
    """What the model has that the chunk model does not cost, one phrase each."""
    out = []
    types = f.get("layer_types")
    window = f.get("sliding_window")
    if types is not None and not (isinstance(types, list) and len(types) == layers):
        raise ModelConfigError(f"{f.where}: layer_types must list one entry per layer ({layers}), got {types!r}")
    sliding = sum(t == "sliding_attention" for t in types) if types else (layers if window else 0)
    if window and sliding and f.get("use_sliding_window") is not False:
        out.append(f"sliding-window attention (window {window}) on {sliding} of {layers} layers, costed as full "
                   "causal attention")
    other = sorted({t for t in types or [] if t not in ("full_attention", "sliding_attention")})
    for t in other:
        count = sum(x == t for x in types)
        out.append(f"{t} on {count} of {layers} layers, costed as full causal attention")
    if kind == "gpt_oss":
        out.append("attention sinks (one learned logit per head; not costed)")
    return tuple(out)


__all__ = ["MODEL_TYPES", "ConfigReading", "ModelConfigError", "config_fields", "model_name", "read_config",
           "read_fields"]
