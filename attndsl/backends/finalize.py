"""The last step of every export, torch-free: strip what is not reproducible, record the
provenance in the model's metadata, check it, and hold it as its files (`Exported`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from .. import __version__
from ..errors import ExportError
from ..placement import enforced, require_placed
from ..targets import VERIFIED_ORT, get
from .exported import Exported, Reader, graphs, without_weights

__all__ = ["MAX_IR_VERSION", "Provenance", "finalize"]

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
    quantization: str | None = None  # quantize.Quantization.text() of a quantized export
    max_total_length: int | None = None  # a decoding model's longest sequence, when bounded
    # limits.length_limits: axis -> (the longest it takes, why), read back by run and bench
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
            "attndsl.target": self.target,
            "attndsl.dtype": self.dtype,
        }
        if self.weights_sha256:  # the weights' source: a seed drew nothing, so none is recorded
            props["attndsl.weights_sha256"] = self.weights_sha256
        else:
            props["attndsl.seed"] = str(self.seed)
        if self.form != "forward":
            props["attndsl.form"] = self.form
        if self.kv_cache:
            props["attndsl.kv_cache"] = self.kv_cache
        if self.quantization:
            props["attndsl.quantization"] = self.quantization
        if self.max_total_length:
            props["attndsl.max_total_length"] = str(self.max_total_length)
        for axis, longest, why in self.limits:
            props[f"attndsl.max_{axis}"] = str(longest)
            props[f"attndsl.max_{axis}.why"] = why
        if get(self.target).planned:  # contrib kernels whose meaning is release-specific
            props["attndsl.onnxruntime"] = " or ".join(VERIFIED_ORT)
        return props


def finalize(model: onnx.ModelProto, provenance: Provenance,
             deferred: Mapping[str, Reader] | None = None) -> Exported:
    """Strip non-reproducible debug data, record provenance, check; the model as its files.
    `deferred`: initializers left without data and how to read each (`build_model`), read
    only as the files are written."""
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
    skeleton = without_weights(model)
    try:
        onnx.checker.check_model(skeleton, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ExportError(f"exported model for `{provenance.layer}` fails onnx.checker: "
                          f"{str(exc).splitlines()[0]}") from None
    target = get(provenance.target)
    if target.planned and enforced():  # a planned target never emits a node its provider lacks
        require_placed(skeleton, target.provider, f"the {target.name} model of "
                       f"`{provenance.layer}`", {t.name for t in model.graph.initializer})
    return Exported(model, provenance.layer, deferred)
