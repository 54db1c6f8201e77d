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
from pathlib import Path

import numpy as np

from .checkpoint_files import Checkpoint, open_checkpoint, read_tensors
from .errors import Diagnostic, SpecError, UsageError
from .families import FAMILIES, LM_NAMES, Names
from .families.names import Split
from .progress import report
from .spec import Attention, Transformer

__all__ = ["Checkpoint", "gather", "open_checkpoint", "read_tensors"]

def family_of(cfg: dict) -> Names:
    """The name table of the checkpoint whose config is `cfg`."""
    model_type = cfg.get("model_type")
    if model_type not in FAMILIES:
        raise UsageError(f"checkpoint family `{model_type}` has no name table; supported: "
                         f"{', '.join(sorted(FAMILIES))}")
    return FAMILIES[model_type].names(cfg)


def gather(ckpt: Checkpoint, spec: Attention | Transformer, wanted: dict[str, tuple[int, ...]],
           layer: int = 0) -> dict[str, np.ndarray]:
    """attndsl's tensors (`wanted`: name -> shape) from the checkpoint, or SpecError naming
    every missing, misshapen or unused tensor."""
    fam = family_of(ckpt.config)
    keys = _strip_bases(ckpt.files, fam.bases)
    out: dict[str, np.ndarray] = {}
    used: set[str] = set()
    missing: dict[str, list[tuple[str, tuple[int, ...], bool]]] = {}  # theirs -> [(ours, ..)]
    problems: list[Diagnostic] = []
    picked_layers = range(spec.layers) if isinstance(spec, Transformer) else [layer]
    for i, (ours, shape) in enumerate(wanted.items()):
        report(f"reading {ckpt.root.name}", i, len(wanted))
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
    table |= {_name(v) for t in fam.by_kernel.values() for v in t.values()}
    domain = {p + t for p in prefixes for t in table}
    if isinstance(spec, Transformer):  # a stack of hidden states leaves embedding and head
        domain |= {v for k, v in fam.top.items() if spec.vocab is not None or k not in
                   (*LM_NAMES, *_EMBEDDING_NAMES)}
    unused = sorted(k for k in domain if k in keys and k not in used)
    every = {_name(v) for v in fam.every()}
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


# what a language model's embedding and head hold beside LM_NAMES (GPT-2's positions, Phi-2's
# head bias): a stack of hidden states leaves them too
_EMBEDDING_NAMES = ("position_embeddings.weight", "lm_head.bias")
_LAYER = re.compile(r"layers\.(\d+)\.(.*)")


def _source(fam: Names, spec: Attention | Transformer, ours: str,
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
    source = fam.layer_names(attn.kernel).get(inner, inner)
    if isinstance(source, tuple):
        return fam.layer.format(i=i) + source[0], source[1], attn
    return fam.layer.format(i=i) + source, None, attn
