"""Where a checkpoint keeps each tensor attndsl names (`Names`), and the pieces the families'
tables are built from: plain renames, fused projections split by rows or per head."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..spec import Attention

__all__ = ["ATTN", "GATED", "LM", "LM_NAMES", "Names", "Split", "gate_joined", "linear", "norms",
           "per_head", "qkv_names", "rows", "same"]

# the names of a block's feed-forward sublayer (`Names.blocks`), of its side block's
# (`Names.sides`)
_FFN_PARTS = ("mlp.", "ffn_norm.")
_SIDE_PARTS = ("side_norm.", "side_attn.", "side_ffn_norm.", "side_mlp.")
# a fused tensor (a NumPy array or torch tensor: both reshape and slice alike), the attention
# of its layer and the config -> attndsl's piece of it
Split = Callable[[Any, Attention, dict], Any]


@dataclass(frozen=True)
class Names:
    """Where a family keeps each tensor attndsl names. `layer` is the checkpoint prefix of
    layer i; `names` maps attndsl's name within a layer (after `layers.{i}.`) to the
    checkpoint's name within its layer, or to (fused name, split), or to (name, split,
    (other names, ...)): a tensor joined from several of the layer's, the split taking them
    as a list, the first named first (AFMoE's gate_proj into the query projection's rows);
    `top` maps names outside the layers (to a name, or to (name, split): OPT's position table
    past its first rows; or (name, split, (other names, ...)), BERT's positions joined to its
    first token type's row). `bases` are prefixes a task model adds (`model.`, `transformer.`);
    `by_kernel` the entries of layers whose kernel differs (`layer_names`)."""

    layer: str
    names: dict[str, str | tuple]
    top: dict[str, str | tuple] = field(default_factory=dict)
    bases: tuple[str, ...] = ()
    # entries that replace `names`' in the layers whose attention has a kernel of this class
    # name (Qwen3-Next's delta-rule layers keep their projections under `linear_attn.`)
    by_kernel: dict[str, dict[str, str | tuple[str, Split]]] = field(default_factory=dict)
    # what the checkpoint holds outside every spec attndsl reads of it (regular expressions
    # of names without `bases`): embeddings and heads the table does not list, a decoder
    outside: tuple[str, ...] = ()
    # layers past config.json's count are a multi-token prediction module (DeepSeek-V3's),
    # which the model's forward does not run
    past_layers: bool = False
    # attndsl's blocks per checkpoint layer (LongCat-Flash's two sublayers): block i is the
    # checkpoint's layer i // sublayers, and `{s}` in an entry stands for i % sublayers
    sublayers: int = 1
    # checkpoint layers per block (Nemotron-H's, each one mixer: an attention layer and the
    # MLP layer after it): block i's (attention's layer, feed-forward's layer or None); the
    # names of its feed-forward (`mlp.`, `ffn_norm.`) are read from the latter. (): layer i
    blocks: tuple[tuple[int, int | None], ...] = ()
    # per block, what `{name}` stands for in its entries (Zamba2's: `{m}` its mixer's module,
    # `{k}` its side block's adapter slot): every block's, where any entry has one
    fields: dict[int, dict[str, str]] = field(default_factory=dict)
    # the checkpoint layer holding block i's side block tensors (`side_*` but `side_proj`:
    # Zamba2's shared blocks, kept once under the first layer of each), by block
    sides: dict[int, int] = field(default_factory=dict)
    # a tensor a checkpoint may keep under other names instead (tied copies: BART's shared
    # embedding saved as the decoder's alone), tried in order where it lacks the first
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def at(self, i: int, ours: str = "") -> str:
        """The checkpoint prefix of attndsl's block i (where `blocks` are given, of the layer
        holding its tensor `ours`; a side block's, of the layer keeping it: `sides`)."""
        if i in self.sides and ours.startswith(_SIDE_PARTS):
            return self.layer.format(i=self.sides[i])
        if self.blocks and i >= len(self.blocks):  # (a spec of more blocks: layers past its)
            return self.layer.format(i=max(max(a, f or a) for a, f in self.blocks) + 1 + i
                                     - len(self.blocks))
        if self.blocks:
            attn, ffn = self.blocks[i]
            return self.layer.format(i=ffn if ffn is not None and ours.startswith(_FFN_PARTS)
                                     else attn)
        return self.layer.format(i=i // self.sublayers)

    def past(self, layer: int, blocks: int) -> bool:
        """Whether the checkpoint's layer `layer` lies past attndsl's first `blocks` blocks
        (a layer of sublayers: all of them read, or none)."""
        if self.blocks:
            return all(layer not in pair for pair in self.blocks[:blocks])
        return (layer + 1) * self.sublayers > blocks

    def sub(self, source: str | tuple, i: int) -> str | tuple:
        """An entry with block i's sublayer in place of `{s}`, and its `fields`."""
        if self.sublayers == 1 and not self.fields:
            return source
        values = {"s": str(i % self.sublayers), **self.fields.get(i, {})}

        def put(name: str) -> str:
            for key, value in values.items():
                name = name.replace(f"{{{key}}}", value)
            return name

        if isinstance(source, str):
            return put(source)
        return (put(source[0]), source[1],
                *((tuple(put(n) for n in source[2]),) if len(source) > 2 else ()))

    def layer_names(self, kernel: object) -> dict[str, str | tuple[str, Split]]:
        """The table of a layer whose attention has `kernel`."""
        return self.names | self.by_kernel.get(type(kernel).__name__, {})

    def top_name(self, ours: str) -> str | None:
        """The checkpoint's name of a tensor outside the layers, or None."""
        source = self.top.get(ours)
        return source[0] if isinstance(source, tuple) else source

    def top_names(self) -> set[str]:
        """The checkpoint's names of every tensor outside the layers."""
        return {self.top_name(k) for k in self.top}

    def every(self) -> list[str | tuple[str, Split]]:
        """Every entry, of every kind of layer."""
        return [self.sub(v, i) for i in (self.fields or range(self.sublayers))
                for v in (*self.names.values(),
                          *(v for t in self.by_kernel.values() for v in t.values()))]


def rows(start: Callable[[Attention, dict], int], size: Callable[[Attention, dict], int]) -> Split:
    """Rows start .. start + size of a fused projection."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        return t[start(a, cfg): start(a, cfg) + size(a, cfg)]
    return split


def per_head(part: int) -> Split:
    """[heads, 3, head_dim] interleaving (GPT-NeoX, BLOOM, Falcon without GQA/MQA)."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        return t.reshape(a.heads, 3, a.head_dim, *t.shape[1:])[:, part].reshape(
            a.heads * a.head_dim, *t.shape[1:])
    return split


def _gate_rows(a: Attention) -> int:
    """The gate rows per head that `output_gate` puts after each head's query rows."""
    from ..mechanisms import MECHANISMS

    return MECHANISMS["output_gate"].query_rows(a, a.mechanism("output_gate"))


def _joined(t: list[Any], a: Attention, cfg: dict) -> Any:
    q, gate = (np.asarray(x) for x in t)
    rest, rows = q.shape[1:], _gate_rows(a)
    return np.concatenate([q.reshape(a.heads, a.head_dim, *rest),
                           gate.reshape(a.heads, rows, *rest)], axis=1).reshape(
        a.heads * (a.head_dim + rows), *rest)


def _joined_bias(t: Any, a: Attention, cfg: dict) -> Any:
    q = np.asarray(t).reshape(a.heads, a.head_dim)
    return np.concatenate([q, np.zeros((a.heads, _gate_rows(a)), q.dtype)], axis=1).reshape(-1)


def gate_joined(gate: str) -> dict:
    """q_proj's weight and bias under an output gate from a projection of its own (`gate`,
    bias-free: AFMoE's, LFM3's, Laguna's): per head its head_dim query rows, then its gate rows
    (value_dim, or one with `per_head = true`; docs/LANGUAGE.md, `output_gate`), the bias
    zeros in the gate rows."""
    return {"self_attn.q_proj.weight": ("self_attn.q_proj.weight", _joined, (gate,)),
            "self_attn.q_proj.bias": ("self_attn.q_proj.bias", _joined_bias)}


def qkv_names(fused: str, make: Callable[[int], Split], bias: bool = True) -> dict:
    """q, k and v projections (weights and biases) split from one fused tensor."""
    out = {}
    for i, p in enumerate("qkv"):
        out[f"self_attn.{p}_proj.weight"] = (f"{fused}.weight", make(i))
        if bias:
            out[f"self_attn.{p}_proj.bias"] = (f"{fused}.bias", make(i))
    return out


def same(*names: str) -> dict[str, str]:
    return {n: n for n in names}


def linear(ours: str, theirs: str) -> dict[str, str]:
    """A linear layer's (or LayerNorm's) weight and bias."""
    return {f"{ours}.weight": f"{theirs}.weight", f"{ours}.bias": f"{theirs}.bias"}


def norms(pairs: dict[str, str]) -> dict[str, str]:
    return {k: v for ours, theirs in pairs.items() for k, v in linear(ours, theirs).items()}


ATTN = {k: v for p in "qkvo" for k, v in linear(f"self_attn.{p}_proj",
                                                 f"self_attn.{p}_proj").items()}
ATTN |= same("self_attn.q_norm.weight", "self_attn.k_norm.weight")
GATED = {k: v for p in ("gate", "up", "down")
         for k, v in linear(f"mlp.{p}_proj", f"mlp.{p}_proj").items()}
# a language model's token embedding and head, outside the task model's base prefix
LM_NAMES = ("embed_tokens.weight", "lm_head.weight")
LM = dict(zip(LM_NAMES, LM_NAMES, strict=True))
