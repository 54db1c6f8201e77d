"""Torch module -> ONNX through torch.onnx.export (dynamo, opset 23), then made reproducible
and self-describing: node debug metadata stripped (it holds file paths), spec and provenance
recorded in `metadata_props`, checked with `onnx.checker` (full_check); one file, or with
external data over 2 GB (`exported.Exported`).

Same spec + seed + weights + options -> byte-identical output."""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import warnings
from dataclasses import dataclass

import onnx
import torch
from torch import Tensor, nn

from .. import __version__
from ..errors import ExportError
from ..spec import (
    MAX_LENGTH,
    Attention,
    Learned,
    LinformerKernel,
    Transformer,
    input_names,
    length_limits,
    output_name,
)
from ..targets import VERIFIED_ORT, get
from .exported import Exported, graphs

__all__ = ["ExampleShape", "Positional", "Provenance", "dynamic_shapes", "example_inputs", "export",
           "finalize", "input_names"]

OPSET = 23
# ONNX Runtime 1.2x reads IR versions up to 10..13; the exporter writes 10. Never exceed this.
MAX_IR_VERSION = 10


@dataclass(frozen=True)
class Provenance:
    """What `metadata_props` records about how a file was made."""

    source_name: str
    source_text: str
    layer: str
    seed: int
    target: str
    dtype: str = "float32"
    weights_sha256: str | None = None
    form: str = "forward"  # or decode: the decoding form (KV caches in and out)
    kv_cache: str | None = None  # a decoding model's: in_place or growing
    # spec.length_limits: axis -> (the longest it takes, why), read back by run and bench
    limits: tuple[tuple[str, int, str], ...] = ()

    @property
    def spec_file(self) -> str:
        """The spec's file name alone: how its path was typed (`./x.attn`, a home folder) must
        not change the bytes, nor leak into the model."""
        return os.path.basename(self.source_name)

    def props(self) -> dict[str, str]:
        props = {
            "attndsl.version": __version__,
            "attndsl.layer": self.layer,
            "attndsl.spec_file": self.spec_file,
            "attndsl.spec": self.source_text,
            "attndsl.spec_sha256": hashlib.sha256(self.source_text.encode()).hexdigest(),
            "attndsl.seed": str(self.seed),
            "attndsl.target": self.target,
            "attndsl.dtype": self.dtype,
        }
        if self.weights_sha256:
            props["attndsl.weights_sha256"] = self.weights_sha256
        if self.form != "forward":
            props["attndsl.form"] = self.form
        if self.kv_cache:
            props["attndsl.kv_cache"] = self.kv_cache
        for axis, longest, why in self.limits:
            props[f"attndsl.max_{axis}"] = str(longest)
            props[f"attndsl.max_{axis}.why"] = why
        if get(self.target).planned:  # contrib kernels whose meaning is release-specific
            props["attndsl.onnxruntime"] = " or ".join(VERIFIED_ORT)
        return props


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
        if isinstance(a.kernel, LinformerKernel):
            L, S = (L, min(S, a.kernel.max_len)) if a.kind == "cross" else \
                (min(L, a.kernel.max_len), S)
    out: dict[str, Tensor] = {}
    for name in input_names(spec):
        if name == "x":
            out[name] = torch.randn(B, L, attn.d_model, generator=g, dtype=dtype)
        elif name == "input_ids":
            out[name] = torch.randint(0, spec.vocab, (B, L), generator=g)
        elif name == "memory":
            out[name] = torch.randn(B, S, attn.memory_dim, generator=g, dtype=dtype)
        elif name == "key_lengths":
            out[name] = torch.full((B,), S if attn.kind == "cross" else L, dtype=torch.int64)
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
    """The longest query and memory lengths the layer takes: MAX_LENGTH, or less where a
    Linformer's E and F have max_len columns (the keys' count, L or the memory's S)."""
    limits = length_limits(spec)
    return tuple(min(MAX_LENGTH, limits.get(axis, (MAX_LENGTH,))[0])
                 for axis in ("length", "memory_length"))


def dynamic_shapes(names: tuple[str, ...], longest: tuple[int, int] = (MAX_LENGTH, MAX_LENGTH),
                   inferred: bool = False) -> tuple[tuple[dict[int, object], ...]]:
    """Per input, its dynamic axes (lengths up to `longest`, queries' and memory's); nested
    once because `Positional.forward` takes *args. `inferred`: every axis `Dim.DYNAMIC`, whose
    ranges torch.export works out itself (an LSH layer's chunk arithmetic yields guards that
    hold at every length but that it cannot prove against a declared range)."""
    if inferred:
        B = L = S = torch.export.Dim.DYNAMIC
    else:
        B = torch.export.Dim("batch", min=1, max=1 << 16)
        L = torch.export.Dim("length", min=1, max=longest[0])
        S = torch.export.Dim("memory_length", min=1, max=longest[1])
    table = {"x": {0: B, 1: L}, "input_ids": {0: B, 1: L}, "memory": {0: B, 1: S},
             "key_lengths": {0: B},
             "segment_ids": {0: B, 1: L}, "memory_segment_ids": {0: B, 1: S}}
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


def finalize(model: onnx.ModelProto, provenance: Provenance) -> Exported:
    """Strip non-reproducible debug data, record provenance, check; the model as its files."""
    for graph in graphs(model.graph):
        graph.doc_string = ""
        for node in graph.node:
            node.doc_string = ""
            del node.metadata_props[:]
        for value in (*graph.input, *graph.output, *graph.value_info):
            del value.metadata_props[:]
        for init in graph.initializer:
            del init.metadata_props[:]
    for fn in model.functions:
        for node in fn.node:
            node.doc_string = ""
            del node.metadata_props[:]
    model.producer_name = "attndsl"
    model.producer_version = __version__
    model.doc_string = f"attndsl {provenance.layer} from {provenance.spec_file}"
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    del model.metadata_props[:]
    for key, value in sorted(provenance.props().items()):
        model.metadata_props.add(key=key, value=value)
    try:
        onnx.checker.check_model(_skeleton(model), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ExportError(f"exported model for `{provenance.layer}` fails onnx.checker: "
                          f"{str(exc).splitlines()[0]}") from None
    return Exported(model, provenance.layer)


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each initializer turned into a graph input of the same type and shape.

    onnx.checker's full check (types and shapes through every node) then runs without copying
    the weights several times over (serialized, parsed in C++, inferred, parsed back); the
    weights' own data is consistent by construction (one raw_data of the declared shape)."""
    skeleton = onnx.ModelProto()
    _copy_fields(model, skeleton, skip="graph")
    _copy_fields(model.graph, skeleton.graph, skip="initializer")
    graph = model.graph
    for tensor in graph.initializer:
        skeleton.graph.input.append(onnx.helper.make_tensor_value_info(
            tensor.name, tensor.data_type, list(tensor.dims)))
    return skeleton


def _copy_fields(source, target, *, skip: str) -> None:
    """Copy every set field of a protobuf message but one."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        elif field.message_type:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


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
