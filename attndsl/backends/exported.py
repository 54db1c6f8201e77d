"""A finalized ONNX model, as the files it is written to.

Protobuf serializes at most 2 GiB in one message, so a model over that (a real checkpoint of
0.5 B parameters or more in float32) keeps its tensors in ONNX external data: `<name>.onnx.data`
beside `<name>.onnx`, as onnxruntime-genai's folders do. The data file holds every initializer
of 1 KiB or more, in graph order, each at an offset aligned to 4 KiB (ONNX Runtime maps it
into memory); the model file names it by its file name alone, so the pair can be moved
together. Both are byte-identical for identical inputs. Smaller models stay one file."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import onnx
from google.protobuf.message import EncodeError

from ..errors import ExportError

__all__ = ["MAX_ONNX_BYTES", "Exported", "graphs"]

MAX_ONNX_BYTES = 2 * 1024**3 - 1  # protobuf's limit for one message
_EXTERNAL_FROM = 1024  # bytes: smaller tensors (shapes, scalars) stay in the model file
_ALIGN = 4096


class Exported:
    """The model of one export: `files(name)` gives the bytes of `name` (and of `name.data`
    when the model is over MAX_ONNX_BYTES), `bytes()` the single file of a model that fits."""

    def __init__(self, model: onnx.ModelProto, layer: str):
        self.layer = layer
        self.data: bytes | None = None
        self.single: bytes | None = None  # a model that fits: its one file, serialized once
        self.model: onnx.ModelProto | None = None  # over 2 GiB: the model without its tensors
        if _over_limit(model):
            self.data = _externalize(model)
            self.model = model
        else:  # the weights are held once, as bytes, not also as a proto
            self.single = model.SerializeToString(deterministic=True)

    @property
    def external(self) -> bool:
        return self.data is not None

    def files(self, name: str) -> dict[str, bytes]:
        """{name: the model file} or, over 2 GiB, {name: ..., name + '.data': the tensors}."""
        if self.single is not None:
            return {name: self.single}
        location = f"{os.path.basename(name)}.data"
        for tensor in _external_tensors(self.model):
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = location
        model = self.model.SerializeToString(deterministic=True)
        if len(model) > MAX_ONNX_BYTES:
            raise ExportError(f"`{self.layer}` is over 2 GB as ONNX even without its "
                              "tensors; protobuf cannot write it")
        return {name: model, f"{name}.data": self.data}

    def bytes(self) -> bytes:
        """The model as one file; ExportError for a model over 2 GiB, which needs its data file
        (`files`, or write it with `Layer.export_onnx` / `attndsl compile`)."""
        if self.data is not None:
            raise ExportError(f"`{self.layer}` is over 2 GB as ONNX, more than one file can "
                              "hold: write it to a folder (Layer.export_onnx, attndsl "
                              "compile), which puts its tensors in external data")
        return self.files("model.onnx")["model.onnx"]

    def summary(self) -> str:
        """'(2.6 MB, sha256 9e2c397bd7f5...)', with the data file's size where there is one."""
        files = self.files("model.onnx")
        model = files["model.onnx"]
        text = f"{len(model) / 1e6:.1f} MB, sha256 {hashlib.sha256(model).hexdigest()[:12]}..."
        if self.data is not None:
            size = len(self.data)
            text += "; tensors " + (f"{size / 1e9:.2f} GB" if size >= 1e9 else
                                    f"{size / 1e6:.1f} MB") + " in external data"
        return f"({text})"

    def write(self, folder: str | os.PathLike[str], name: str = "model.onnx") -> Path:
        """Write the files into `folder` (plainly: for a temporary folder); the model's path."""
        for file, content in self.files(name).items():
            Path(folder, file).write_bytes(content)
        return Path(folder, name)


def _over_limit(model: onnx.ModelProto) -> bool:
    try:
        return model.ByteSize() > MAX_ONNX_BYTES
    except EncodeError:  # protobuf cannot even count past its limit
        return True


def graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from graphs(attr.g)
            for g in attr.graphs:
                yield from graphs(g)


def _external_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    for graph in graphs(model.graph):
        for tensor in graph.initializer:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                yield tensor


def _externalize(model: onnx.ModelProto) -> bytes:
    """Move every initializer of _EXTERNAL_FROM bytes or more out of `model` (in place) into
    one buffer, returned; each tensor records its offset and length there."""
    chunks: list[bytes] = []
    offset = 0
    for graph in graphs(model.graph):
        for tensor in graph.initializer:
            if not tensor.HasField("raw_data") or len(tensor.raw_data) < _EXTERNAL_FROM:
                continue
            pad = -offset % _ALIGN
            if pad:
                chunks.append(b"\0" * pad)
                offset += pad
            data = tensor.raw_data
            chunks.append(data)
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", "model.onnx.data"), ("offset", str(offset)),
                               ("length", str(len(data)))):
                tensor.external_data.add(key=key, value=value)
            offset += len(data)
    return b"".join(chunks)
