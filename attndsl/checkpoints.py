"""Hugging Face checkpoints as they come (`--weights HF_DIR`): a folder with config.json and
model.safetensors (or a sharded model.safetensors.index.json, or pytorch_model.bin), read with
that family's name table (docs/CHECKPOINTS.md), fused projections split, and the layers the spec
describes picked out: layer i of a stack is the checkpoint's layer i; an attention alone is the
checkpoint's layer 0 (`layer` chooses another).

Strict where it matters: every tensor the spec needs must be there with its shape, and every
tensor of the checkpoint must be used or known to lie outside the spec (a bias the spec leaves
out, a qk-norm it lacks, layers past its own would otherwise be dropped silently, and the spec
would not describe the model): the other layers of an attention alone, embeddings and heads
but for a language model (a spec with `vocab`), what the family's table lists as outside
(`Names.outside`, `Names.past_layers`), old buffers and task heads. `allow_unused_weights`
leaves the rest out with a warning instead."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .checkpoint_files import Checkpoint, open_checkpoint, read_tensors
from .errors import Diagnostic, SpecError, UsageError
from .families import FAMILIES, LM_NAMES, Names
from .families.base import WHOLE
from .families.names import Split
from .progress import report
from .spec import Attention, Transformer

__all__ = ["Checkpoint", "UnusedWeights", "allow_unused_weights", "gather", "open_checkpoint",
           "read_tensors"]


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=4)


@dataclass(frozen=True)
class UnusedWeights:
    """A weights path (a file or a checkpoint folder) whose tensors the spec does not use are
    left out, named in one warning, rather than refused: `allow_unused_weights(path)`, given
    wherever a method takes `weights` (the command line's --allow-unused-weights). A path
    (os.PathLike) to everything else."""

    path: str | os.PathLike[str]
    warn: Callable[[str], None] = _warn
    # what was said already: a command reads its weights for each backend, and says it once
    said: set[str] = field(default_factory=set, compare=False)

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return os.fspath(self.path)

    def tell(self, message: str) -> None:
        if message not in self.said:
            self.said.add(message)
            self.warn(message)


def allow_unused_weights(path: str | os.PathLike[str],
                         warn: Callable[[str], None] | None = None) -> UnusedWeights:
    """`path` as weights that may hold tensors the spec does not use: they are left out and
    named once through `warn` (default: a Python warning), not refused (exit 2)."""
    if isinstance(path, UnusedWeights):
        return path
    return UnusedWeights(path) if warn is None else UnusedWeights(path, warn)


def family_of(cfg: dict) -> Names:
    """The name table of the checkpoint whose config is `cfg`."""
    model_type = cfg.get("model_type")
    if model_type not in FAMILIES:
        from .hf_fields import unknown_family

        raise UsageError(f"{unknown_family(cfg)}: no name table for its tensors; supported: "
                         f"{', '.join(sorted(FAMILIES))}")
    return FAMILIES[model_type].names(cfg)


def gather(ckpt: Checkpoint, spec: Attention | Transformer, wanted: dict[str, tuple[int, ...]],
           layer: int = 0, allow_unused: bool = False,
           warn: Callable[[str], None] = _warn) -> dict[str, np.ndarray]:
    """attndsl's tensors (`wanted`: name -> shape) from the checkpoint, or SpecError naming
    every missing, misshapen or unused tensor (every tensor the checkpoint holds is read by
    the spec or known to lie outside it: other layers of an attention alone, embeddings and
    heads of a stack of hidden states, buffers and task heads). `allow_unused`: unused
    tensors are left out, and `warn` (default: a Python warning) is given one line naming
    them all. `layer`: the block an attention alone is read from (the checkpoint's layer
    layer // sublayers, its sublayer layer % sublayers where a family's layers hold several:
    `Names.sublayers`)."""
    whole = isinstance(spec, Transformer) and spec.encoder is not None  # (T5's table then)
    fam = family_of({**ckpt.config, WHOLE: whole})
    keys = _strip_bases(ckpt.files, fam.bases)
    for name, others in fam.aliases.items():  # (a tied tensor saved under a copy's name)
        found = next((o for o in others if o in keys), None)
        if name not in keys and found is not None:
            keys[name] = keys.pop(found)
    out: dict[str, np.ndarray] = {}
    used: set[str] = set()
    missing: dict[str, list[tuple[str, tuple[int, ...], bool]]] = {}  # theirs -> [(ours, ..)]
    problems: list[Diagnostic] = []
    picked_layers = range(spec.layers) if isinstance(spec, Transformer) else [layer]
    for i, (ours, shape) in enumerate(wanted.items()):
        report(f"reading {ckpt.root.name}", i, len(wanted))
        theirs, split, attn, joined = _source(fam, spec, ours, layer)
        absent = [n for n in (theirs, *joined) if n not in keys]
        used.update(n for n in (theirs, *joined) if n in keys)  # (a joined tensor's others)
        if absent:
            missing.setdefault(absent[0], []).append((ours, shape, split is not None))
            continue

        def read(name: str = keys[theirs], split: Split | None = split,
                 attn: Attention = attn,
                 joined: tuple[str, ...] = tuple(keys[n] for n in joined)) -> np.ndarray:
            t = ckpt.tensor(name)
            if joined:  # the split joins the tensors, its own first
                t = [t, *(ckpt.tensor(n) for n in joined)]
            return t if split is None else split(t, attn, ckpt.config)
        t = read()
        if tuple(t.shape) != shape:
            problems.append(Diagnostic(
                f"{ckpt.root}: `{keys[theirs]}` gives `{ours}` the shape {list(t.shape)}, "
                f"expected {list(shape)}", hint="the spec's sizes differ from config.json; "
                "`attndsl import` writes a spec that matches"))
            continue
        out[ours] = ckpt.kept(ours, t, read)  # streamed: checked now, read again when used
    prefixes = tuple(dict.fromkeys(fam.at(i, part) for i in picked_layers
                                   for part in ("", "mlp.")))
    entries = [(k, v) for t in (fam.names, *fam.by_kernel.values()) for k, v in t.items()
               if isinstance(spec, Transformer) or k.startswith("self_attn.")]
    # (each picked block's entries under its checkpoint layer: its own sublayer's)
    domain = {fam.at(i, k) + n for i in picked_layers for k, v in entries
              for n in _names(fam.sub(v, i))}
    if isinstance(spec, Transformer):  # a stack of hidden states leaves embedding and head
        domain |= {fam.top_name(k) for k in fam.top if spec.vocab is not None or k not in
                   (*LM_NAMES, *_EMBEDDING_NAMES)}
        if spec.tied and _tied_head(ckpt, fam, keys):  # transformers ties them on loading
            domain -= {fam.top_name("lm_head.weight")}
    # (a tensor of no elements holds nothing to use: AFMoE's shared experts of width 0)
    unused = sorted(k for k in domain if k in keys and k not in used
                    and 0 not in ckpt.shape(keys[k]))
    every = {n for v in fam.every() for n in _names(v)}
    layer_re = re.compile(re.escape(fam.layer).replace(r"\{i\}", r"\d+"))

    def stray(k: str, layer_prefix: str | None) -> bool:
        """An unused name the table does not know, in the same layer (or outside layers)."""
        if k in used or k in fam.top_names() or k in LM_NAMES:
            return False
        if layer_prefix is None:
            return layer_re.match(k) is None
        return k.startswith(layer_prefix) and k[len(layer_prefix):] not in every

    prefix = _task_prefix(keys) if missing else ""
    for theirs, wants in missing.items():
        layer_of = next((p for p in prefixes if theirs.startswith(p)), None)
        ours, shape, fused = wants[0]

        near = [k for k in keys if stray(k, layer_of) and _fits(ckpt.shape(keys[k]), shape, fused)]
        hint = None
        if len(near) == 1:
            full = keys[near[0]][: len(keys[near[0]]) - len(near[0])] + theirs
            hint = (f"this checkpoint's `{keys[near[0]]}` is unused and has that shape: if it "
                    f"is the tensor, name it `{full}`")
        # the checkpoint's own name (with the prefix its other tensors carry), and the spec's
        # where it differs (a rename, or the pieces of a fused tensor)
        what = ", ".join(f"`{o}`" for o, _, _ in wants if o != theirs)
        problems.append(Diagnostic(
            f"{ckpt.root}: missing `{_full_name(theirs, prefix)}` (shape {list(shape)}"
            + (f"; the spec's {what}" if what else "") + ")", hint=hint))
    # (line, hint) for every tensor the spec does not use: of the layers it describes, then
    # the rest of the checkpoint
    head = fam.top_name("lm_head.weight") if isinstance(spec, Transformer) and spec.tied else None
    unread = [(f"`{keys[k]}` {list(ckpt.shape(keys[k]))} is not used by the spec",
               "the spec ties its LM head to the embedding (`tie_embeddings = true`), but "
               "this checkpoint's config does not and its head differs; `attndsl import` "
               "writes a spec that matches" if k == head else
               "the spec leaves out a tensor of this layer (a bias, a norm?); `attndsl "
               "import` writes a spec that matches") for k in unused]
    unread += _strays(ckpt, fam, spec, keys, used | domain)
    if allow_unused and unread:  # named in one warning, left out
        warn(f"{ckpt.root}: left out, as not used by the spec: "
             + "; ".join(line.removesuffix(" is not used by the spec") for line, _ in unread))
    elif not allow_unused:
        problems += [Diagnostic(f"{ckpt.root}: {line}", hint=f"{hint}; {_ALLOW}")
                     for line, hint in unread]
    if problems:
        raise SpecError(problems)
    return out


_STRAY_HINT = ("attndsl does not read this tensor, so the spec does not describe the model that "
               "has it (a qk-norm, another layer, a vision tower?)")
_ALLOW = "--allow-unused-weights leaves it out, with a warning"
# what any checkpoint may carry that no spec reads: buffers older transformers saved (RoPE's
# inv_freq, GPT-2's and GPT-NeoX's causal-mask buffers, BERT's position ids), and task heads
# outside the stack (classification, question answering, BERT's pooler and MLM head)
_NOT_NEEDED = re.compile(
    r"(.+\.)?(rotary_emb\.inv_freq|(attn|attention)\.(masked_)?bias|position_ids)"
    r"|(score|classifier|qa_outputs|pooler|cls|multiple_choice_head)(\.\w+)*\.(weight|bias)")
_LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


def _strays(ckpt: Checkpoint, fam: Names, spec: Attention | Transformer, keys: dict[str, str],
            accounted: set[str]) -> list[tuple[str, str]]:
    """The checkpoint's tensors that the spec does not use and that no name table knows to be
    outside it, one line each: names the family's table does not know (Hunyuan's
    `query_layernorm` in a Llama checkpoint, an unrelated tensor), layers past the config's
    count (unless the family keeps a multi-token prediction module there), and for a stack,
    the layers past its own (one line for them all); each with its hint."""
    known_top = {*fam.top_names(), *LM_NAMES, *_EMBEDDING_NAMES}
    every = {n for v in fam.every() for n in _names(v)}
    outside = re.compile("|".join(fam.outside) or "(?!)")
    layer_re = re.compile(re.escape(fam.layer).replace(r"\{i\}", r"(\d+)"))
    count = next((c for c in (ckpt.config.get(k) for k in _LAYER_COUNTS) if isinstance(c, int)),
                 None)
    lines: list[tuple[str, str]] = []
    past: list[str] = []
    for k in sorted(keys):
        if k in accounted or _NOT_NEEDED.fullmatch(k) or outside.fullmatch(k):
            continue
        match = layer_re.match(k)
        if match is None:
            if k not in known_top:
                lines.append((f"`{keys[k]}` {list(ckpt.shape(keys[k]))} is not used by the "
                              "spec", _STRAY_HINT))
            continue
        i = int(match.group(1))
        if count is not None and i >= count:
            if not fam.past_layers:
                lines.append((f"`{keys[k]}` {list(ckpt.shape(keys[k]))} is not used by the "
                              f"spec", f"layer {i} is past config.json's {count} layers"))
        elif k[match.end():] not in every:
            lines.append((f"`{keys[k]}` {list(ckpt.shape(keys[k]))} is not used by the spec",
                          _STRAY_HINT))
        elif isinstance(spec, Transformer) and fam.past(i, spec.layers):
            past.append(keys[k])
    if past:
        blocks = f"{spec.layers} block" + ("s" if spec.layers != 1 else "")
        lines.append((f"{len(past)} tensors of layers past the spec's {blocks} (from "
                      f"`{past[0]}`) are not used by the spec",
                      (f"the checkpoint has {count} layers" if count is not None else
                       "config.json gives no layer count") +
                      "; `attndsl import` writes a spec of them all"))
    return lines


def _task_prefix(keys: dict[str, str]) -> str:
    """The task model's prefix (`model.`, `transformer.`) most of the checkpoint's tensors
    carry outside a language model's head, or ""."""
    prefixes = [full[: len(full) - len(short)] for short, full in keys.items()
                if not short.startswith("lm_head.")]
    return max(set(prefixes), key=prefixes.count) if prefixes else ""


def _full_name(theirs: str, prefix: str) -> str:
    """A missing tensor's name in the checkpoint: with the task model's prefix its other
    tensors carry (`_task_prefix`); a language model's head sits outside it."""
    return theirs if theirs.startswith("lm_head.") else prefix + theirs


def _tied_head(ckpt: Checkpoint, fam: Names, keys: dict[str, str]) -> bool:
    """Is the checkpoint's stored LM head the embedding it is tied to, so that a tied spec
    leaves it out as transformers does on loading? Where its config ties them
    (tie_word_embeddings, the family's default where absent), or where the head holds the
    embedding's values bit for bit. Otherwise the head is the checkpoint's own, which a tied
    spec would drop."""
    model_type = ckpt.config.get("model_type")
    family = FAMILIES.get(model_type)
    default = family.defaults.get("tie_word_embeddings") if family is not None else None
    if default is None:  # as `attndsl import` reads it
        default = str(model_type).startswith("gemma")
    if ckpt.config.get("tie_word_embeddings", default) is True:
        return True
    head, embedding = fam.top_name("lm_head.weight"), fam.top_name("embed_tokens.weight")
    if head not in keys or embedding not in keys:
        return False
    a, b = ckpt.tensor(keys[head]), ckpt.tensor(keys[embedding])
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(
        np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def _name(source: str | tuple) -> str:
    """The checkpoint name of a table entry (a fused entry names the tensor it splits)."""
    return source[0] if isinstance(source, tuple) else source


def _names(source: str | tuple) -> tuple[str, ...]:
    """Every checkpoint name a table entry reads (a joining entry's others too)."""
    if not isinstance(source, tuple):
        return (source,)
    return (source[0], *(source[2] if len(source) > 2 else ()))


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


# what a language model's embedding and head hold beside LM_NAMES (GPT-2's positions, Phi-2's
# head bias, BLOOM's embedding norm, ModernBERT's prediction head): a stack of hidden states
# leaves them too
_EMBEDDING_NAMES = ("position_embeddings.weight", "lm_head.bias", "embedding_norm.weight",
                    "embedding_norm.bias", "head_transform.dense.weight",
                    "head_transform.dense.bias", "head_transform.norm.weight",
                    "head_transform.norm.bias")
_LAYER = re.compile(r"layers\.(\d+)\.(.*)")


def _source(fam: Names, spec: Attention | Transformer, ours: str,
            layer: int) -> tuple[str, Split | None, Attention, tuple[str, ...]]:
    """(checkpoint name, split or None, the attention of its layer, the names of the
    layer's other tensors the split joins to it) for one attndsl tensor."""
    if isinstance(spec, Attention):
        i, inner, attn = layer, f"self_attn.{ours}", spec
    else:
        match = _LAYER.fullmatch(ours)
        if match is None:
            source = fam.top.get(ours, ours)
            if isinstance(source, tuple):  # (a split, and the tensors it joins: BERT's table)
                return source[0], source[1], spec.attention, \
                    tuple(source[2]) if len(source) > 2 else ()
            return source, None, spec.attention, ()
        i, inner = int(match.group(1)), match.group(2)
        attn = spec.parallel if spec.parallel is not None and inner.startswith(
            "parallel_attn.") else spec.side.attention if spec.side is not None and \
            inner.startswith("side_attn.") else spec.layer_attention(i)
    source = fam.sub(fam.layer_names(attn.kernel).get(inner, inner), i)
    at = fam.at(i, inner)
    if isinstance(source, tuple):
        joined = tuple(at + n for n in source[2]) if len(source) > 2 else ()
        return at + source[0], source[1], attn, joined
    return at + source, None, attn, ()
