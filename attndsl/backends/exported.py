"""A finalized ONNX model, as the files it is written to.

Protobuf serializes at most 2 GiB in one message, so a model over that (a real checkpoint of
0.5 B parameters or more in float32) keeps its tensors in ONNX external data: `<name>.onnx.data`
beside `<name>.onnx`, as onnxruntime-genai's folders do. The data file holds every initializer
of 1 KiB or more, in graph order, each at an offset aligned to 4 KiB (ONNX Runtime maps it
into memory); the model file names it by its file name alone, so the pair can be moved
together. Both are byte-identical for identical inputs. Smaller models stay one file.

Weights are streamed: the lowering leaves each weight's data out of the model and gives a
function that reads it (from the checkpoint, converted to the model's dtype), and the files
are written tensor by tensor (`streams`), each read, written and dropped in turn. Memory then
holds the largest tensor and the graph, whatever the model's size. The single file is the
same bytes protobuf writes: its length prefixes are computed from the tensors' sizes."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import EncodeError

from ..errors import ExportError
from ..output import Stream

__all__ = ["MAX_ONNX_BYTES", "Exported", "Reader", "copy_field", "graphs", "without_weights"]

MAX_ONNX_BYTES = 2 * 1024**3 - 1  # protobuf's limit for one message
_EXTERNAL_FROM = 1024  # bytes: smaller tensors (shapes, scalars) stay in the model file
_ALIGN = 4096
# the protobuf field numbers the single file is spliced at (onnx.proto)
_GRAPH_OF_MODEL, _INITIALIZER_OF_GRAPH, _RAW_DATA_OF_TENSOR = 7, 5, 9

# A deferred tensor's data: a contiguous array of its element type and shape, read when the
# file is written (and read again for each write: nothing keeps it)
Reader = Callable[[], np.ndarray]


class Exported:
    """The model of one export: `streams(name)` gives the contents of `name` (and of
    `name.data` when the model is over MAX_ONNX_BYTES) to write; `files(name)` the same as
    bytes, `bytes()` the single file of a model that fits. `deferred`: initializers of the
    main graph left without data, by name, and how to read each (`build_model`)."""

    def __init__(self, model: onnx.ModelProto, layer: str,
                 deferred: Mapping[str, Reader] | None = None):
        self.layer = layer
        self.deferred = dict(deferred or {})
        self.sizes = {t.name: _nbytes(t) for t in model.graph.initializer
                      if t.name in self.deferred}
        self.single: bytes | None = None  # a model that fits, without deferred tensors
        self.model: onnx.ModelProto | None = model
        self.layout: list[tuple[int, bytes | str]] | None = None  # over 2 GiB: the data file
        self._sha256: str | None = None
        self._stream: Stream | None = None  # the single file's, once made: it hashes itself
        if _inline_size(model, self.sizes) > MAX_ONNX_BYTES:
            self.layout = self._externalize()
        elif not self.deferred:  # the weights are held once, as bytes, not also as a proto
            self.single = model.SerializeToString(deterministic=True)
            self.model = None

    def proto(self) -> onnx.ModelProto:
        """The model as a proto, to read its graph (a deferred tensor without its data)."""
        return self.model if self.model is not None else onnx.load_from_string(self.single)

    @property
    def external(self) -> bool:
        return self.layout is not None

    def streams(self, name: str) -> dict[str, bytes | Stream]:
        """{name: the model file} or, over 2 GiB, {name: ..., name + '.data': the tensors};
        a file that holds deferred tensors as a `Stream`, read as it is written."""
        if self.single is not None:
            return {name: self.single}
        if self.layout is None:
            return {name: self._single_stream()}
        location = f"{os.path.basename(name)}.data"
        for tensor in _external_tensors(self.model):
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = location
        model = self.model.SerializeToString(deterministic=True)
        if len(model) > MAX_ONNX_BYTES:
            raise ExportError(f"`{self.layer}` is over 2 GB as ONNX even without its "
                              "tensors; protobuf cannot write it")
        return {name: model, f"{name}.data": self._data_stream()}

    def files(self, name: str) -> dict[str, bytes]:
        """`streams` as bytes (the whole model in memory: write large ones with `write`). A
        single file is kept once read (sessions of one model in memory are made from it)."""
        if self.layout is None and self.single is None:
            self.single = self._single_stream().bytes()
            self.model, self.deferred = None, {}
        return {file: content if isinstance(content, bytes) else content.bytes()
                for file, content in self.streams(name).items()}

    def bytes(self) -> bytes:
        """The model as one file; ExportError for a model over 2 GiB, which needs its data file
        (`files`, or write it with `Layer.export_onnx` / `attndsl compile`)."""
        if self.layout is not None:
            raise ExportError(f"`{self.layer}` is over 2 GB as ONNX, more than one file can "
                              "hold: write it to a folder (Layer.export_onnx, attndsl "
                              "compile), which puts its tensors in external data")
        return self.files("model.onnx")["model.onnx"]

    def summary(self) -> str:
        """'(2.6 MB, sha256 9e2c397bd7f5...)', with the data file's size where there is one.
        A streamed single file is hashed as it is written: asked before that, it is read once
        more to hash it."""
        model = self.streams("model.onnx")["model.onnx"]
        if self._sha256 is None and isinstance(model, Stream):
            self._sha256 = model.sha256
        if self._sha256 is None:
            digest = hashlib.sha256()
            for chunk in model if isinstance(model, Stream) else (model,):
                digest.update(chunk)
            self._sha256 = digest.hexdigest()
        text = f"{len(model) / 1e6:.1f} MB, sha256 {self._sha256[:12]}..."
        if self.layout is not None:
            size = self._data_size()
            text += "; tensors " + (f"{size / 1e9:.2f} GB" if size >= 1e9 else
                                    f"{size / 1e6:.1f} MB") + " in external data"
        return f"({text})"

    def write(self, folder: str | os.PathLike[str], name: str = "model.onnx") -> Path:
        """Write the files into `folder` (plainly: for a temporary folder); the model's path."""
        for file, content in self.streams(name).items():
            with open(Path(folder, file), "wb") as f:
                for chunk in content if isinstance(content, Stream) else (content,):
                    f.write(chunk)
        return Path(folder, name)

    def _read(self, name: str) -> memoryview:
        data = self.deferred[name]()
        if data.nbytes != self.sizes[name]:  # the reader disagrees with the declared shape
            raise ExportError(f"`{self.layer}`: tensor `{name}` has {data.nbytes} bytes, its "
                              f"type says {self.sizes[name]}")
        # as bytes: a buffer of bfloat16 (ml_dtypes') has no format memoryview takes
        return memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))

    def _externalize(self) -> list[tuple[int, bytes | str]]:
        """Move every initializer of _EXTERNAL_FROM bytes or more out of the model (in place):
        each records its offset and length in the data file; the layout of that file, (offset,
        the bytes or the name of a deferred tensor), returned. Smaller deferred tensors are
        read into the model now."""
        layout: list[tuple[int, bytes | str]] = []
        offset = 0
        for graph in graphs(self.model.graph):
            for tensor in graph.initializer:
                deferred = graph is self.model.graph and tensor.name in self.deferred
                if deferred:
                    size = self.sizes[tensor.name]
                    if size < _EXTERNAL_FROM:
                        tensor.raw_data = self._read(tensor.name).tobytes()
                        continue
                elif not tensor.HasField("raw_data") or len(tensor.raw_data) < _EXTERNAL_FROM:
                    continue
                else:
                    size = len(tensor.raw_data)
                offset += -offset % _ALIGN
                layout.append((offset, tensor.name if deferred else tensor.raw_data))
                tensor.ClearField("raw_data")
                tensor.data_location = onnx.TensorProto.EXTERNAL
                for key, value in (("location", "model.onnx.data"), ("offset", str(offset)),
                                   ("length", str(size))):
                    tensor.external_data.add(key=key, value=value)
                offset += size
        return layout

    def _data_size(self) -> int:
        if not self.layout:
            return 0
        offset, last = self.layout[-1]
        return offset + (len(last) if isinstance(last, bytes) else self.sizes[last])

    def _data_stream(self) -> Stream:
        def chunks() -> Iterator[bytes | memoryview]:
            at = 0
            for offset, content in self.layout:
                if offset > at:
                    yield b"\0" * (offset - at)
                data = content if isinstance(content, bytes) else self._read(content)
                yield data
                at = offset + len(data)
        return Stream(self._data_size(), chunks)

    def _single_stream(self) -> Stream:
        """The model file with its deferred tensors read in, as protobuf would serialize the
        whole model (deterministically): fields in number order, so the model is the bytes
        before its graph, the graph, the bytes after; the graph likewise around its
        initializers; a deferred tensor its fields, then its raw_data (field 9, the last it
        has)."""
        if self._stream is not None:
            return self._stream
        model = self.model
        graph = model.graph
        inits = [(t.SerializeToString(deterministic=True), t.name if t.name in self.deferred
                  and not t.HasField("raw_data") else None) for t in graph.initializer]
        sizes = [len(b) + (_field_size(_RAW_DATA_OF_TENSOR, self.sizes[d]) if d else 0)
                 for b, d in inits]
        graph_before, graph_after = _around(graph, _INITIALIZER_OF_GRAPH)
        graph_size = len(graph_before) + len(graph_after) + sum(
            _field_size(_INITIALIZER_OF_GRAPH, n) for n in sizes)
        model_before, model_after = _around(model, _GRAPH_OF_MODEL)

        def chunks() -> Iterator[bytes | memoryview]:
            yield model_before + _key(_GRAPH_OF_MODEL) + _varint(graph_size) + graph_before
            for (head, deferred), size in zip(inits, sizes, strict=True):
                yield _key(_INITIALIZER_OF_GRAPH) + _varint(size) + head
                if deferred:
                    yield _key(_RAW_DATA_OF_TENSOR) + _varint(self.sizes[deferred])
                    yield self._read(deferred)
            yield graph_after + model_after
        total = len(model_before) + len(model_after) + _field_size(_GRAPH_OF_MODEL,
                                                                   graph_size)
        self._stream = Stream(total, chunks, hashed=True)
        return self._stream


def _nbytes(tensor: onnx.TensorProto) -> int:
    return int(np.prod(tensor.dims, dtype=np.int64)) * np.dtype(
        onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field: int) -> bytes:
    return _varint(field << 3 | 2)  # a length-delimited field


def _field_size(field: int, n: int) -> int:
    """Bytes of a length-delimited field of n bytes: its key, its length, its content."""
    return len(_key(field)) + len(_varint(n)) + n


def _around(message, field: int) -> tuple[bytes, bytes]:
    """A message serialized without `field`, split where that field would be: the fields
    numbered below it, and above it."""
    before, after = type(message)(), type(message)()
    for descriptor, value in message.ListFields():
        if descriptor.number != field:
            copy_field(before if descriptor.number < field else after, descriptor, value)
    return before.SerializeToString(deterministic=True), after.SerializeToString(
        deterministic=True)


def copy_field(target, descriptor, value) -> None:
    """Set one field (as `ListFields` gives it) of a protobuf message on `target`."""
    if descriptor.is_repeated:
        getattr(target, descriptor.name).extend(value)
    elif descriptor.message_type:
        getattr(target, descriptor.name).CopyFrom(value)
    else:
        setattr(target, descriptor.name, value)


def _inline_size(model: onnx.ModelProto, sizes: dict[str, int]) -> int:
    """The serialized size of `model` with its deferred tensors' data (`sizes`) in it."""
    try:
        size = model.ByteSize()
    except EncodeError:  # protobuf cannot even count past its limit
        return MAX_ONNX_BYTES + 1
    if not sizes:
        return size
    graph = model.graph
    before = graph.ByteSize()
    after = before
    for tensor in graph.initializer:
        if tensor.name in sizes and not tensor.HasField("raw_data"):
            n = tensor.ByteSize()
            after += (_field_size(_INITIALIZER_OF_GRAPH, n + _field_size(_RAW_DATA_OF_TENSOR,
                                                                          sizes[tensor.name]))
                      - _field_size(_INITIALIZER_OF_GRAPH, n))
    return size - _field_size(_GRAPH_OF_MODEL, before) + _field_size(_GRAPH_OF_MODEL, after)


def without_weights(model: onnx.ModelProto, keep_bytes: int = 0) -> onnx.ModelProto:
    """The model with each initializer over `keep_bytes` (and each held in external data)
    turned into a graph input of the same type and shape.

    onnx.checker's full check and shape inference then run without copying the weights several
    times over (serialized, parsed in C++, inferred, parsed back); small initializers kept
    (shapes, a Reshape's target) let inference see their values."""
    light = onnx.ModelProto()
    for descriptor, value in model.ListFields():
        if descriptor.name != "graph":
            copy_field(light, descriptor, value)
    for descriptor, value in model.graph.ListFields():
        if descriptor.name != "initializer":
            copy_field(light.graph, descriptor, value)
    for tensor in model.graph.initializer:
        if tensor.ByteSize() > keep_bytes or tensor.data_location == tensor.EXTERNAL:
            light.graph.input.append(onnx.helper.make_tensor_value_info(
                tensor.name, tensor.data_type, list(tensor.dims)))
        else:
            light.graph.initializer.append(tensor)
    return light


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
