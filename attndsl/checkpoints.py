"""Hugging Face checkpoints as they come (`--weights HF_DIR`): a folder with config.json and
model.safetensors (or a sharded model.safetensors.index.json, or pytorch_model.bin), read with
that family's name table (docs/CHECKPOINTS.md), fused projections split, and the layers the spec
describes picked out: layer i of a stack is the checkpoint's layer i; an attention alone is the
checkpoint's layer 0 (`layer` chooses another).

Strict where it matters: every tensor the spec needs must be there with its shape, and every
tensor of a picked layer must be used (a checkpoint bias the spec leaves out would otherwise be
dropped silently). Other layers are not read, nor embeddings and heads but for a language
model (a spec with `vocab`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .checkpoint_files import Checkpoint, open_checkpoint, read_tensors
from .errors import Diagnostic, SpecError, UsageError
from .spec import Attention, Transformer

__all__ = ["FAMILIES", "Checkpoint", "gather", "open_checkpoint", "read_tensors"]

Split = Callable[[torch.Tensor, Attention, dict], torch.Tensor]


@dataclass(frozen=True)
class Family:
    """Where a family keeps each tensor attndsl names. `layer` is the checkpoint prefix of
    layer i; `names` maps attndsl's name within a layer (after `layers.{i}.`) to the
    checkpoint's name within its layer, or to (fused name, split); `top` maps names outside the
    layers. `bases` are prefixes a task model adds (`model.`, `transformer.`)."""

    layer: str
    names: dict[str, str | tuple[str, Split]]
    top: dict[str, str] = field(default_factory=dict)
    bases: tuple[str, ...] = ()


def _rows(start: Callable[[Attention, dict], int], size: Callable[[Attention, dict], int]):
    def split(t: torch.Tensor, a: Attention, cfg: dict) -> torch.Tensor:
        return t[start(a, cfg): start(a, cfg) + size(a, cfg)]
    return split


def _per_head(part: int) -> Split:
    """[heads, 3, head_dim] interleaving (GPT-NeoX, BLOOM, Falcon without GQA/MQA)."""
    def split(t: torch.Tensor, a: Attention, cfg: dict) -> torch.Tensor:
        return t.reshape(a.heads, 3, a.head_dim, *t.shape[1:])[:, part].reshape(
            a.heads * a.head_dim, *t.shape[1:])
    return split


def _falcon(part: int) -> Split:
    """Falcon's three layouts: grouped [kv, groups + 2, head_dim] (new_decoder_architecture),
    [heads + 2, head_dim] (multi_query) or per head [heads, 3, head_dim]."""
    def split(t: torch.Tensor, a: Attention, cfg: dict) -> torch.Tensor:
        rest = t.shape[1:]
        if cfg.get("new_decoder_architecture"):
            g = a.heads // a.kv_heads
            grouped = t.reshape(a.kv_heads, g + 2, a.head_dim, *rest)
            piece = grouped[:, :g] if part == 0 else grouped[:, g + part - 1: g + part]
            return piece.reshape(-1, *rest)
        if cfg.get("multi_query", True):
            flat = t.reshape(a.heads + 2, a.head_dim, *rest)
            piece = flat[: a.heads] if part == 0 else flat[a.heads + part - 1]
            return piece.reshape(-1, *rest)
        return _per_head(part)(t, a, cfg)
    return split


def _qkv_names(fused: str, make: Callable[[int], Split], bias: bool = True) -> dict:
    out = {}
    for i, p in enumerate("qkv"):
        out[f"self_attn.{p}_proj.weight"] = (f"{fused}.weight", make(i))
        if bias:
            out[f"self_attn.{p}_proj.bias"] = (f"{fused}.bias", make(i))
    return out


def _same(*names: str) -> dict[str, str]:
    return {n: n for n in names}


def _linear(ours: str, theirs: str) -> dict[str, str]:
    return {f"{ours}.weight": f"{theirs}.weight", f"{ours}.bias": f"{theirs}.bias"}


_ATTN = {k: v for p in "qkvo" for k, v in _linear(f"self_attn.{p}_proj",
                                                  f"self_attn.{p}_proj").items()}
_ATTN |= _same("self_attn.q_norm.weight", "self_attn.k_norm.weight")
_GATED = {k: v for p in ("gate", "up", "down")
          for k, v in _linear(f"mlp.{p}_proj", f"mlp.{p}_proj").items()}
# a language model's token embedding and head, outside the task model's base prefix
LM_NAMES = ("embed_tokens.weight", "lm_head.weight")
_LM = dict(zip(LM_NAMES, LM_NAMES, strict=True))
_LLAMA = Family("layers.{i}.", {**_ATTN, **_GATED, "attn_norm.weight": "input_layernorm.weight",
                                "ffn_norm.weight": "post_attention_layernorm.weight"},
                {"norm.weight": "norm.weight", **_LM}, ("model.",))
_GEMMA = Family("layers.{i}.", {**_ATTN, **_GATED,
                                "attn_norm.weight": "input_layernorm.weight",
                                "post_attn_norm.weight": "post_attention_layernorm.weight",
                                "ffn_norm.weight": "pre_feedforward_layernorm.weight",
                                "post_ffn_norm.weight": "post_feedforward_layernorm.weight"},
                {"norm.weight": "norm.weight", **_LM},
                ("model.language_model.", "language_model.model.", "model."))


def _q_rows(a: Attention, cfg: dict) -> int:
    return a.heads * a.head_dim


def _kv_rows(a: Attention, cfg: dict) -> int:
    return a.kv_heads * a.head_dim


def _half(cfg_key: str) -> Callable[[Attention, dict], int]:
    return lambda a, cfg: cfg[cfg_key]


_PHI3 = Family("layers.{i}.", {
    "self_attn.q_proj.weight": ("self_attn.qkv_proj.weight", _rows(lambda a, c: 0, _q_rows)),
    "self_attn.k_proj.weight": ("self_attn.qkv_proj.weight", _rows(_q_rows, _kv_rows)),
    "self_attn.v_proj.weight": ("self_attn.qkv_proj.weight",
                                _rows(lambda a, c: _q_rows(a, c) + _kv_rows(a, c), _kv_rows)),
    "self_attn.o_proj.weight": "self_attn.o_proj.weight",
    "mlp.gate_proj.weight": ("mlp.gate_up_proj.weight",
                             _rows(lambda a, c: 0, _half("intermediate_size"))),
    "mlp.up_proj.weight": ("mlp.gate_up_proj.weight",
                           _rows(_half("intermediate_size"), _half("intermediate_size"))),
    "mlp.down_proj.weight": "mlp.down_proj.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight"},
    {"norm.weight": "norm.weight", **_LM}, ("model.",))


def _norms(pairs: dict[str, str]) -> dict[str, str]:
    return {k: v for ours, theirs in pairs.items() for k, v in _linear(ours, theirs).items()}


_NEOX = Family("layers.{i}.", {
    **_qkv_names("attention.query_key_value", _per_head),
    **_linear("self_attn.o_proj", "attention.dense"),
    **_norms({"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}),
    **_linear("mlp.fc1", "mlp.dense_h_to_4h"), **_linear("mlp.fc2", "mlp.dense_4h_to_h")},
    _norms({"norm": "final_layer_norm"}), ("gpt_neox.",))
_GPTJ = Family("h.{i}.", {
    **{k: v for p in "qkv" for k, v in _linear(f"self_attn.{p}_proj", f"attn.{p}_proj").items()},
    **_linear("self_attn.o_proj", "attn.out_proj"), **_norms({"attn_norm": "ln_1"}),
    **_linear("mlp.fc1", "mlp.fc_in"), **_linear("mlp.fc2", "mlp.fc_out")},
    _norms({"norm": "ln_f"}), ("transformer.",))
_BLOOM = Family("h.{i}.", {
    **_qkv_names("self_attention.query_key_value", _per_head),
    **_linear("self_attn.o_proj", "self_attention.dense"),
    **_norms({"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}),
    **_linear("mlp.fc1", "mlp.dense_h_to_4h"), **_linear("mlp.fc2", "mlp.dense_4h_to_h")},
    _norms({"norm": "ln_f"}), ("transformer.",))
_FALCON_MLP = {**_linear("self_attn.o_proj", "self_attention.dense"),
               **_linear("mlp.fc1", "mlp.dense_h_to_4h"),
               **_linear("mlp.fc2", "mlp.dense_4h_to_h"),
               **_qkv_names("self_attention.query_key_value", _falcon)}
_FALCON_TWO_NORMS = Family("h.{i}.", {**_FALCON_MLP, **_norms({"attn_norm": "ln_attn",
                                                                "ffn_norm": "ln_mlp"})},
                           _norms({"norm": "ln_f"}), ("transformer.",))
_FALCON = Family("h.{i}.", {**_FALCON_MLP, **_norms({
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"})},
    _norms({"norm": "ln_f"}), ("transformer.",))
_BERT = Family("encoder.layer.{i}.", {
    **_linear("self_attn.q_proj", "attention.self.query"),
    **_linear("self_attn.k_proj", "attention.self.key"),
    **_linear("self_attn.v_proj", "attention.self.value"),
    **_linear("self_attn.o_proj", "attention.output.dense"),
    **_norms({"attn_norm": "attention.output.LayerNorm", "ffn_norm": "output.LayerNorm"}),
    **_linear("mlp.fc1", "intermediate.dense"), **_linear("mlp.fc2", "output.dense")},
    {}, ("bert.",))
_T5 = Family("encoder.block.{i}.", {
    **{f"self_attn.{p}_proj.weight": f"layer.0.SelfAttention.{p}.weight" for p in "qkvo"},
    "self_attn.relative_attention_bias.weight":
        "layer.0.SelfAttention.relative_attention_bias.weight",
    "attn_norm.weight": "layer.0.layer_norm.weight",
    "ffn_norm.weight": "layer.1.layer_norm.weight",
    "mlp.fc1.weight": "layer.1.DenseReluDense.wi.weight",
    "mlp.fc2.weight": "layer.1.DenseReluDense.wo.weight",
    "mlp.gate_proj.weight": "layer.1.DenseReluDense.wi_0.weight",
    "mlp.up_proj.weight": "layer.1.DenseReluDense.wi_1.weight",
    "mlp.down_proj.weight": "layer.1.DenseReluDense.wo.weight"},
    {"norm.weight": "encoder.final_layer_norm.weight",
     "relative_attention_bias.weight":
         "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"})

FAMILIES: dict[str, Family] = {
    "llama": _LLAMA, "mistral": _LLAMA, "qwen2": _LLAMA, "qwen3": _LLAMA, "gemma2": _GEMMA,
    "gemma3": _GEMMA, "gemma3_text": _GEMMA, "phi3": _PHI3, "gpt_neox": _NEOX, "gptj": _GPTJ,
    "bloom": _BLOOM, "falcon": _FALCON, "bert": _BERT, "t5": _T5,
}


def family_of(cfg: dict) -> Family:
    model_type = cfg.get("model_type")
    if model_type == "falcon" and (cfg.get("new_decoder_architecture") and
                                   cfg.get("num_ln_in_parallel_attn") in (None, 2)):
        return _FALCON_TWO_NORMS
    if model_type not in FAMILIES:
        raise UsageError(f"checkpoint family `{model_type}` has no name table; supported: "
                         f"{', '.join(sorted(FAMILIES))}")
    return FAMILIES[model_type]


def gather(ckpt: Checkpoint, spec: Attention | Transformer, wanted: dict[str, tuple[int, ...]],
           layer: int = 0) -> dict[str, torch.Tensor]:
    """attndsl's tensors (`wanted`: name -> shape) from the checkpoint, or SpecError naming
    every missing, misshapen or unused tensor."""
    fam = family_of(ckpt.config)
    keys = _strip_bases(ckpt.files, fam.bases)
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    missing: dict[str, list[tuple[str, tuple[int, ...], bool]]] = {}  # theirs -> [(ours, ..)]
    problems: list[Diagnostic] = []
    picked_layers = range(spec.layers) if isinstance(spec, Transformer) else [layer]
    for ours, shape in wanted.items():
        theirs, split, attn = _source(fam, spec, ours, layer)
        if theirs not in keys:
            missing.setdefault(theirs, []).append((ours, shape, split is not None))
            continue
        used.add(theirs)
        t = ckpt.tensor(keys[theirs])
        if split is not None:
            t = split(t, attn, ckpt.config)
        if tuple(t.shape) != shape:
            problems.append(Diagnostic(
                f"{ckpt.root}: `{keys[theirs]}` gives `{ours}` the shape {list(t.shape)}, "
                f"expected {list(shape)}", hint="the spec's sizes differ from config.json; "
                "`attndsl import` writes a spec that matches"))
            continue
        out[ours] = t
    prefixes = tuple(fam.layer.format(i=i) for i in picked_layers)
    table = {_name(v) for k, v in fam.names.items()
             if isinstance(spec, Transformer) or k.startswith("self_attn.")}
    domain = {p + t for p in prefixes for t in table}
    if isinstance(spec, Transformer):  # a stack of hidden states leaves embedding and head
        domain |= {v for k, v in fam.top.items() if spec.vocab is not None or k not in LM_NAMES}
    unused = sorted(k for k in domain if k in keys and k not in used)
    every = {_name(v) for v in fam.names.values()}
    layer_re = re.compile(re.escape(fam.layer).replace(r"\{i\}", r"\d+"))

    def stray(k: str, layer_prefix: str | None) -> bool:
        """An unused name the table does not know, in the same layer (or outside layers)."""
        if k in used or k in fam.top.values() or k in LM_NAMES:
            return False
        if layer_prefix is None:
            return layer_re.match(k) is None
        return k.startswith(layer_prefix) and k[len(layer_prefix):] not in every

    for theirs, wants in missing.items():
        layer_of = next((p for p in prefixes if theirs.startswith(p)), None)
        ours, shape, fused = wants[0]

        near = [k for k in keys if stray(k, layer_of) and _fits(ckpt.shape(keys[k]), shape, fused)]
        hint = None
        if len(near) == 1:
            full = keys[near[0]][: len(keys[near[0]]) - len(near[0])] + theirs
            hint = (f"this checkpoint's `{keys[near[0]]}` is unused and has that shape: if it "
                    f"is the tensor, name it `{full}`")
        what = ", ".join(f"`{o}`" for o, _, _ in wants)
        problems.append(Diagnostic(f"{ckpt.root}: missing `{theirs}` (for {what}, shape "
                                   f"{list(shape)})", hint=hint))
    for k in unused:
        problems.append(Diagnostic(
            f"{ckpt.root}: `{keys[k]}` {list(ckpt.shape(keys[k]))} is not used by the spec",
            hint="the spec leaves out a tensor of this layer (a bias, a norm?); "
                 "`attndsl import` writes a spec that matches"))
    if problems:
        raise SpecError(problems)
    return out


def _name(source: str | tuple[str, Split]) -> str:
    """The checkpoint name of a table entry (a fused entry names the tensor it splits)."""
    return source[0] if isinstance(source, tuple) else source


def _fits(found: tuple[int, ...], shape: tuple[int, ...], fused: bool) -> bool:
    """Could a tensor of shape `found` be the one wanted? A fused tensor holds it among others:
    the same columns, more rows."""
    if fused:
        return found[1:] == shape[1:] and found[0] > shape[0]
    return found == shape


def _strip_bases(names: dict[str, Path], bases: tuple[str, ...]) -> dict[str, str]:
    """name without its task-model prefix -> name in the checkpoint."""
    out = {}
    for name in names:
        short = next((name[len(b):] for b in bases if name.startswith(b)), name)
        out.setdefault(short, name)
    return out


_LAYER = re.compile(r"layers\.(\d+)\.(.*)")


def _source(fam: Family, spec: Attention | Transformer, ours: str,
            layer: int) -> tuple[str, Split | None, Attention]:
    """(checkpoint name, split or None, the attention of its layer) for one attndsl tensor."""
    if isinstance(spec, Attention):
        i, inner, attn = layer, f"self_attn.{ours}", spec
    else:
        match = _LAYER.fullmatch(ours)
        if match is None:
            return fam.top.get(ours, ours), None, spec.attention
        i, inner = int(match.group(1)), match.group(2)
        attn = spec.layer_attention(i)
    source = fam.names.get(inner, inner)
    if isinstance(source, tuple):
        return fam.layer.format(i=i) + source[0], source[1], attn
    return fam.layer.format(i=i) + source, None, attn
