"""The Python API: `load(path)` -> `Program`; `program["name"]` -> `Layer` with `.to_torch`,
`.export_onnx`, `.verify`. Everything here is a thin front over the pipeline stages."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from . import spec as s
from .check import check
from .errors import UsageError
from .limits import length_limits
from .mechanisms import kernel_fact
from .output import Outputs
from .parser import decode, parse, read_source
from .quantize import check_quantization
from .seq2seq import Seq2Seq, encoder_weights
from .source import Source
from .targets import DEFAULT_TARGET, TORCH_PLAN, check_dtype_target, get
from .usage import (
    HEADS,
    PADDINGS,
    check_choice,
    check_dtype,
    check_ints,
    check_memory,
    check_path,
    check_target,
)

__all__ = ["DEFAULT_OUTPUT_DIR", "Layer", "Program", "load", "loads", "read_source"]

DEFAULT_OUTPUT_DIR = Path("exported")


def load(path: str | os.PathLike[str], *, padding: str = "auto", head: str = "auto") -> Program:
    """Parse and check a spec file, or import a Hugging Face checkpoint folder or config.json
    as `attndsl import` (its options, `padding` one of usage.PADDINGS and `head` of
    usage.HEADS; warnings as Python warnings). Raises SpecError if invalid."""
    check_choice("padding", padding, PADDINGS)
    check_choice("head", head, HEADS)
    if Path(path).is_dir() or Path(path).suffix == ".json":  # a checkpoint's config
        from .hf_import import import_config

        notes: list[str] = []
        text = import_config(Path(path), padding, head, notes)
        for note in notes:
            warnings.warn(note, stacklevel=2)
        return loads(text, f"<the spec imported from {path}>")
    return Program(check(parse(read_source(path))))


def loads(text: str, name: str = "<string>") -> Program:
    """Parse and check spec text."""
    return Program(check(parse(decode(text.encode("utf-8"), name))))


class Program:
    """A checked spec file: its layers by name, in source order."""

    def __init__(self, resolved: s.Program):
        self.resolved = resolved

    @property
    def source(self) -> Source:
        return self.resolved.source

    def __getitem__(self, name: str) -> Layer:
        try:
            return Layer(self.resolved.layers[name], self.source)
        except KeyError:
            known = ", ".join(self.resolved.layers) or "none"
            raise UsageError(f"{self.source.name}: no layer named `{name}` (layers: {known})"
                             ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.resolved.layers)

    def __len__(self) -> int:
        return len(self.resolved.layers)

    def _repr_html_(self) -> str:  # Jupyter
        from .notebook import program_html

        return program_html(self)


class Layer(Seq2Seq):
    """One attention or transformer of a checked program (an encoder-decoder model's
    `encoder()` and `generate()`: `seq2seq.Seq2Seq`).

    Heavy stages (torch, onnx, onnxruntime) are imported on first use, so `attndsl check`
    and `fmt` stay fast."""

    def __init__(self, spec: s.Layer, source: Source):
        self.spec = spec
        self.source = source

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return f"Layer({type(self.spec).__name__.lower()} {self.name!r})"

    def _repr_html_(self) -> str:  # Jupyter
        from .notebook import layer_html

        return layer_html(self)

    def graph(self):
        """The graph IR (`attndsl.ir.Graph`)."""
        from .ir import build

        return build(self.spec)

    def to_torch(self, seed: int = 0, weights: str | os.PathLike[str] | None = None,
                 dtype: str = "float32", path: str = "auto"):
        """A trainable torch.nn.Module in eval mode: weights from `weights` (.safetensors or a
        state dict, names per docs/LANGUAGE.md, Weights) or drawn from `seed` (in float32, then
        rounded to `dtype`, so every dtype holds the same weights up to rounding). `path`: how
        its attentions run (`auto`, `flex` or `dense`; `explain --target torch`)."""
        from .backends.inputs import check_float_dtype
        from .backends.torch import seeded_module
        from .dtypes import torch_dtype
        from .weights import load_into

        check_dtype(dtype)
        check_ints("seed", (seed,), 0, 2**63 - 1)
        check_memory(self.name, self.spec)
        check_path(path)
        module = seeded_module(self.spec, seed, path=path)
        if self.model is not None:  # an encoder's: its model's
            weights = dict(self._weights(seed, weights, "float32"))
        if weights is not None:
            load_into(module, weights, self.spec)
        module.register_forward_pre_hook(check_float_dtype, with_kwargs=True)
        return module.to(torch_dtype(dtype))

    def onnx_bytes(self, *, target: str = DEFAULT_TARGET, seed: int = 0,
                   weights: str | os.PathLike[str] | None = None,
                   dtype: str = "float32") -> bytes:
        """The exported ONNX model as one file's bytes (byte-identical for identical
        arguments); a model over 2 GB needs external data: `onnx_model`, `export_onnx`."""
        return self.onnx_model(target=target, seed=seed, weights=weights, dtype=dtype).bytes()

    def onnx_model(self, *, target: str = DEFAULT_TARGET, seed: int = 0,
                   weights: str | os.PathLike[str] | None = None, dtype: str = "float32",
                   quantize=None):
        """The exported ONNX model (`backends.exported.Exported`): `.files(name)` gives
        `name` and, over 2 GB, `name.data` (its tensors), byte-identical for identical
        arguments. `quantize` (quantize.Quantization): the projections' weights as
        MatMulNBits blocks (docs/QUANTIZATION.md)."""
        check_target(target)
        check_dtype(dtype)
        check_dtype_target(dtype, target)
        check_quantization(quantize, target, dtype)
        provenance = self._provenance(seed, target, dtype, weights,
                                      quantization=quantize and quantize.text())
        # a core selector's If and a kernel's own control flow (`Kernel.lowered`): attndsl lowers
        # them, in standard ops
        lowered = any(a.variants or kernel_fact(a.kernel, "lowered")
                      for a in s.attentions_of(self.spec))
        if not get(target).planned and not lowered:  # standard ops, by torch.onnx.export
            from .backends.onnx import export

            module = self.to_torch(seed=seed, weights=weights, dtype=dtype, path="dense")
            return export(self.spec, module, provenance, dtype=dtype)
        from .backends.finalize import finalize
        from .backends.lower import build_model
        from .planner.rewrites import rewrites
        from .strategies import LOWERINGS

        graph, _ = self.plan(target, dtype)
        state = self._weights(seed, weights, dtype)
        model = build_model(graph, state, dtype, deferred=(deferred := {}),
                            strategies=LOWERINGS,
                            rewrites=rewrites(graph, target, dtype, quantize))
        return finalize(model, provenance, deferred)

    def decoder_bytes(self, *, target: str = DEFAULT_TARGET, seed: int = 0,
                      weights: str | os.PathLike[str] | None = None,
                      dtype: str = "float32", bounded: bool = False) -> bytes:
        """`decoder_model` as one file's bytes (models up to 2 GB)."""
        return self.decoder_model(target=target, seed=seed, weights=weights, dtype=dtype,
                                  bounded=bounded).bytes()

    def decoder_model(self, *, target: str = DEFAULT_TARGET, seed: int = 0,
                      weights: str | os.PathLike[str] | None = None,
                      dtype: str = "float32", bounded: bool = False, quantize=None,
                      max_length: int | None = None):
        """The decoding model (docs/LANGUAGE.md, Decoding): new tokens, attention_mask,
        position_ids and past_key_values.{i}.key/.value in; logits (or y) and
        present.{i}.key/.value out. On ort-cpu and ort-cuda, when every attention can,
        GroupQueryAttention writes one max_length buffer per layer in place (metadata
        `attndsl.kv_cache` = in_place); otherwise (and on portable) the cache grows by the new
        tokens each call, in standard ops (`growing`). `bounded`: layers whose mask reaches
        back a bounded number of keys (windows, chunks) keep only those: their cache stops
        growing (`bounded`, the growing layout otherwise). `quantize`: as `onnx_model`.
        `max_length`: no call will hold more tokens (a genai folder's context length), so
        GroupQueryAttention's rotary tables are constants ONNX Runtime folds at session start
        rather than computed for every call."""
        from .backends.finalize import finalize
        from .backends.lower import build_model
        from .decoding import cache_layout, check_decodable
        from .ir import build
        from .planner import plan
        from .planner.rewrites import rewrites
        from .strategies import LOWERINGS

        check_target(target)
        check_dtype(dtype)
        check_dtype_target(dtype, target)
        check_quantization(quantize, target, dtype)
        check_decodable(self.spec)
        state = self._weights(seed, weights, dtype)
        graph, _ = plan(build(self.spec, decode=True, bounded=bounded), target, dtype)
        model = build_model(graph, state, dtype, deferred=(deferred := {}),  # weights read
                            strategies=LOWERINGS,  # as written
                            rewrites=rewrites(graph, target, dtype, quantize, max_length))
        layout = cache_layout(graph)  # in place: GroupQueryAttention, its rotary tables folded
        provenance = self._provenance(seed, target, dtype, weights, form="decode",
                                      kv_cache=layout,
                                      max_total_length=max_length if layout == "in_place"
                                      else None, quantization=quantize and quantize.text())
        return finalize(model, provenance, deferred)

    def _weights(self, seed: int, weights: str | os.PathLike[str] | None,
                 dtype: str) -> Mapping[str, Any]:
        """The weights in float32 as rounded to `dtype` (exact; NumPy has no bfloat16), each
        read from `weights` (`read_weights`: checked against the weight table) or drawn from
        `seed` when asked for (`weights.Weights`: an export holds one at a time)."""
        from .dtypes import round_to
        from .weight_table import weight_table
        from .weights import Weights, seeded

        check_ints("seed", (seed,), 0, 2**63 - 1)
        if self.model is not None:  # an encoder's: its model's `encoder.*` and embedding
            model = self.model.spec  # (the shared embedding, where the encoder has none)
            return encoder_weights(self.model._weights(seed, weights, dtype),
                                   model.encoder_input == "tokens" and model.encoder.vocab is None)
        if hasattr(weights, "state_dict") or hasattr(weights, "items"):  # held in memory
            check_memory(self.name, self.spec)
        table = weight_table(self.spec)
        if weights is not None:
            from .weights import read_weights

            found = read_weights(weights, {w.name: w.shape for w in table}, self.spec,
                                 streamed=True)
        else:  # drawn when the file is written, one at a time, as a file's are read
            found = seeded(table, seed)
        if dtype == "float32":
            return found
        return Weights.of(found, lambda v: round_to(v, dtype).astype("float32"))

    def _provenance(self, seed: int, target: str, dtype: str,
                    weights: str | os.PathLike[str] | None, **form: str | int | None):
        """What the model's metadata records (backends.onnx.Provenance); `weights` a file, a
        folder or a trained module (its tensors' fingerprint)."""
        from .output import file_sha256
        from .weights import fingerprint, in_memory

        arrays = in_memory(weights) if weights is not None else None
        if arrays is not None:  # a trained module's (or a state dict's) own tensors
            return self._record(seed, target, dtype, fingerprint(arrays), **form)
        if weights is not None and not Path(weights).exists():  # before hashing it
            raise UsageError(f"{weights}: no such weights file or folder")
        return self._record(seed, target, dtype, file_sha256(weights) if weights else None,
                            **form)

    def _record(self, seed: int, target: str, dtype: str, weights_sha256: str | None,
                **form: str | int | None):
        """The Provenance of a model of this layer."""
        from .backends.finalize import Provenance

        limits = tuple((axis, n, why) for axis, (n, why) in length_limits(self.spec).items())
        return Provenance(
            source_name=self.source.name, source_text=self.source.text, layer=self.name,
            seed=seed, target=target, dtype=dtype, weights_sha256=weights_sha256,
            limits=limits, **form, **({"form": "encoder"} if self.model is not None else {}))

    def decoder_plan(self, *, target: str = DEFAULT_TARGET, dtype: str = "float32",
                     bounded: bool = False):
        """The decoding graph (unplanned) and the planner's Choice per attention for it, after
        the located checks of `decoder_bytes` (`attndsl explain --decode`)."""
        from .decoding import check_decodable
        from .ir import build
        from .planner import plan

        check_target(target)
        check_decodable(self.spec)
        graph = build(self.spec, decode=True, bounded=bounded)
        return graph, plan(graph, target, dtype)[1]

    def decoder_layout(self, *, target: str = DEFAULT_TARGET, dtype: str = "float32",
                       bounded: bool = False) -> str:
        """The cache layout of `decoder_bytes` with these options (in_place, bounded or
        growing), from the plan alone: no weights are drawn or read."""
        from .decoding import cache_layout
        from .ir import build
        from .planner import plan

        graph = build(self.spec, decode=True, bounded=bounded)
        return cache_layout(plan(graph, target, dtype)[0])

    def plan(self, target: str = DEFAULT_TARGET, dtype: str = "float32"):
        """(planned graph IR, [planner.Choice per attention]) for a target and dtype; target
        `torch`: the torch module's paths (`to_torch`'s default)."""
        from .planner import plan, plan_torch

        if target == TORCH_PLAN:
            return plan_torch(self.graph())
        check_target(target)
        check_dtype(dtype)
        return plan(self.graph(), target, dtype)

    def export_onnx(self, directory: str | os.PathLike[str] = DEFAULT_OUTPUT_DIR, *,
                    target: str = DEFAULT_TARGET, seed: int = 0,
                    weights: str | os.PathLike[str] | None = None,
                    dtype: str = "float32") -> Path:
        """Write `<directory>/<name>.onnx` (and over 2 GB its tensors, `<name>.onnx.data`)
        atomically and return its path. `weights` (here and in every method that takes it): a
        file or checkpoint folder, or a trained module (`to_torch`'s, after training) or a
        state dict, whose own tensors are exported, checked as a file's are."""
        exported = self.onnx_model(target=target, seed=seed, weights=weights, dtype=dtype)
        path = Path(directory) / f"{self.name}.onnx"
        outputs = Outputs()
        for name, data in exported.streams(path.name).items():
            outputs.file(path.with_name(name), data)
        outputs.commit()
        return path

    def torch_program_bytes(self, *, seed: int = 0,
                            weights: str | os.PathLike[str] | None = None,
                            dtype: str = "float32") -> bytes:
        """A `torch.export` program (load with `torch.export.load`), serialized."""
        from .backends.torch import export_program
        from .usage import check_torch_program

        check_torch_program(self.spec)
        return export_program(self.spec, self.to_torch(seed=seed, weights=weights, dtype=dtype,
                                                       path="dense"),
                              dtype=dtype)

    def reference(self, inputs: dict[str, Any], weights: dict[str, Any]):
        """The NumPy reference output (float64) for named inputs and a state dict."""
        from .backends import reference
        from .usage import check_token_ids
        from .weights import as_float64

        if "input_ids" in inputs:  # NumPy's indexing would wrap a negative id
            check_token_ids(inputs["input_ids"], self.spec.vocab)
        return reference.run(self.graph(), inputs, {k: as_float64(v) for k, v in weights.items()})

    def verify(self, *, lengths: Any = None, batches: Any = None,
               providers: tuple[str, ...] = ("cpu",), targets: tuple[str, ...] | None = None,
               seed: int = 0, weights: str | os.PathLike[str] | None = None,
               dtype: str = "float32", progress: Any = None, quantize=None):
        """Reference vs torch vs each target's export on ONNX Runtime (per provider), at
        several shapes -> verify.Report. `lengths`: those given, or (None) chosen from the spec
        with the reason for each (`verify.default_lengths`: past every window, chunk and block,
        both sides of every length threshold that chooses a core, primes). The reference runs
        in float64 on the weights and inputs as rounded to `dtype`, so the report measures the
        computation's error.

        By default every target runs on the CPU provider, and `portable` and `ort-cuda` on
        CUDA (`ort-cpu` is planned for the CPU: its float32 GroupQueryAttention has no CUDA
        kernel); targets given explicitly run on every provider. `quantize`: the planned
        targets' quantized exports against the reference (and torch) on the dequantized
        weights, the quantization's own error against the float weights reported apart."""
        from .verify import verify_layer

        return verify_layer(self, lengths=lengths, batches=batches, providers=providers,
                            targets=targets, seed=seed, weights=weights, dtype=dtype,
                            progress=progress, quantize=quantize)
