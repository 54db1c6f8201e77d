"""Torch module -> ONNX through torch.onnx.export (dynamo, opset 23), then made reproducible
and self-describing: node debug metadata stripped (it holds file paths), spec and provenance
recorded in `metadata_props`, checked with `onnx.checker` (full_check); one file, or with
external data over 2 GB (`exported.Exported`).

Same spec + seed + weights + options -> byte-identical output."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..errors import ExportError
from ..limits import length_limits
from ..mechanisms import kernel_of
from ..spec import (
    MAX_LENGTH,
    Attention,
    Learned,
    Transformer,
    input_names,
    memory_reader,
    output_name,
    reads_streams,
)
from .exported import Exported
from .finalize import Provenance, finalize

__all__ = ["ExampleShape", "Positional", "Provenance", "dynamic_shapes", "example_inputs", "export",
           "finalize", "input_names"]

OPSET = 23


@dataclass(frozen=True)
class ExampleShape:
    batch: int = 2
    length: int = 17
    memory_length: int = 19


def example_inputs(spec: Attention | Transformer, shape: ExampleShape = ExampleShape(),
                   dtype: torch.dtype = torch.float32) -> dict[str, Tensor]:
    attn = spec.attention if isinstance(spec, Transformer) else spec
    g = torch.Generator().manual_seed(0)
    B, L, S = shape.batch, shape.length, shape.memory_length
    for a in spec.attentions if isinstance(spec, Transformer) else (spec,):  # lengths it takes
        if isinstance(a.position, Learned):
            L = min(L, a.position.max_len)
        module = kernel_of(a.kernel)
        limit = module.key_limit(a.kernel) if module else None
        if limit is not None:  # the most keys it takes
            L, S = (L, min(S, limit[0])) if a.kind == "cross" else (min(L, limit[0]), S)
    out: dict[str, Tensor] = {}
    for name in input_names(spec):
        if name == "x":
            out[name] = torch.randn(B, L, attn.d_model, generator=g, dtype=dtype)
        elif name == "input_ids":
            out[name] = torch.randint(0, spec.vocab, (B, L), generator=g)
        elif name == "pixel_values":  # an image of 5 x 7 patches
            p = spec.patches
            out[name] = torch.randn(B, p.channels, 5 * p.size, 7 * p.size, generator=g,
                                    dtype=dtype)
        elif name == "memory":
            out[name] = torch.randn(B, S, memory_reader(spec).memory_dim, generator=g,
                                    dtype=dtype)
        elif name == "key_lengths":  # (a lone cross attention's: its memory rows')
            out[name] = torch.full((B,), S if attn.kind == "cross" else L, dtype=torch.int64)
        elif name == "memory_lengths":  # a decoder stack's memory rows'
            out[name] = torch.full((B,), S, dtype=torch.int64)
        elif name == "position_ids":  # multimodal RoPE's three streams
            out[name] = torch.arange(L).expand(reads_streams(spec), B, L).clone()
        else:  # segment ids (memory rows' for memory_segment_ids)
            n = S if name == "memory_segment_ids" else L
            out[name] = torch.zeros(B, n, dtype=torch.int64)
    return out


class Positional(nn.Module):
    """Calls the layer with keyword inputs, so the graph's inputs are exactly `names`."""

    def __init__(self, module: nn.Module, names: tuple[str, ...]):
        super().__init__()
        self.layer = module
        self.names = names

    def forward(self, *args: Tensor) -> Tensor:
        return self.layer(**dict(zip(self.names, args, strict=True)))


def longest(spec: Attention | Transformer) -> tuple[int, int]:
    """The longest query and memory lengths the layer takes: MAX_LENGTH, or less where its
    `length_limits` say (a kernel's key limit bounds L, or the memory's S)."""
    limits = length_limits(spec)
    return tuple(min(MAX_LENGTH, limits.get(axis, (MAX_LENGTH,))[0])
                 for axis in ("length", "memory_length"))


def dynamic_shapes(names: tuple[str, ...], longest: tuple[int, int] = (MAX_LENGTH, MAX_LENGTH),
                   inferred: bool = False) -> tuple[tuple[dict[int, object], ...]]:
    """Per input, its dynamic axes (lengths up to `longest`, queries' and memory's); nested
    once because `Positional.forward` takes *args. `inferred`: every axis `Dim.DYNAMIC`, whose
    ranges torch.export works out itself (a kernel module with `inferred_shapes`: its chunk
    arithmetic yields guards that hold at every length but that it cannot prove against a
    declared range)."""
    if inferred:
        B = L = S = torch.export.Dim.DYNAMIC
    else:
        B = torch.export.Dim("batch", min=1, max=1 << 16)
        L = torch.export.Dim("length", min=1, max=longest[0])
        S = torch.export.Dim("memory_length", min=1, max=longest[1])
    image = {0: B, 2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}
    table = {"x": {0: B, 1: L}, "input_ids": {0: B, 1: L}, "memory": {0: B, 1: S},
             "key_lengths": {0: B}, "memory_lengths": {0: B},
             "segment_ids": {0: B, 1: L}, "memory_segment_ids": {0: B, 1: S},
             "position_ids": {1: B, 2: L}, "pixel_values": image}
    return (tuple(table[n] for n in names),)


def export(spec: Attention | Transformer, module: nn.Module, provenance: Provenance, *,
           dtype: str = "float32") -> Exported:
    """The ONNX model of `module` (already holding its weights, in `dtype`)."""
    from ..dtypes import torch_dtype

    names = input_names(spec)
    wrapper = Positional(module.eval(), names)
    example = example_inputs(spec, dtype=torch_dtype(dtype))
    args = tuple(example[n] for n in names)
    log = io.StringIO()
    try:
        with _quiet(log), torch.no_grad():
            program = torch.onnx.export(
                # optimize=False: the exporter's optimizer merges the initializer 1e-12 (an
                # RMSNorm eps) into 0.0, and a zero row then divides 0 by 0; ONNX Runtime
                # optimizes the graph itself when it loads it
                wrapper, args, dynamo=True, opset_version=OPSET, external_data=False,
                optimize=False,
                input_names=list(names), output_names=[output_name(spec)],
                dynamic_shapes=dynamic_shapes(names, longest(spec)), verbose=False,
                report=False)
    except Exception as exc:
        detail = log.getvalue().strip().splitlines()[-5:]
        raise ExportError(f"torch.onnx.export failed for `{spec.name}`: "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                          + ("\n" + "\n".join(detail) if detail else "")) from None
    model = program.model_proto
    return finalize(model, provenance)


@contextlib.contextmanager
def _quiet(log: io.StringIO):
    """The exporter narrates to stdout, stderr and logging; keep it for error messages only."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo",
                                              "onnxscript", "torch.fx", "torch._export")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(log), \
                contextlib.redirect_stderr(log):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
