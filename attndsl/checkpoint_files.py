"""Reading a checkpoint's files: a Hugging Face folder (config.json, model.safetensors, a
sharded index or pytorch_model.bin), or one weights file; tensors are read when asked for, as
NumPy arrays (bfloat16 as `ml_dtypes.bfloat16`). .safetensors files are read by NumPy alone;
torch is imported only for a torch state dict (.bin, .pt). Every damaged or hostile file is a
diagnostic naming it (exit 2)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .dtypes import numpy_dtype
from .errors import Diagnostic, SpecError, UsageError
from .hf_fields import read_config, read_json

__all__ = ["Checkpoint", "Unread", "open_checkpoint", "read_tensors"]


@dataclass(frozen=True)
class Unread:
    """A tensor that was checked and dropped: `read()` reads it again (a streamed export)."""

    shape: tuple[int, ...]
    read: Callable[[], np.ndarray]


@dataclass
class Checkpoint:
    """A checkpoint's tensors by name and its config. Files are opened once and tensors read
    one by one (safetensors) or memory-mapped (.bin): embeddings, heads and unpicked layers
    are never loaded."""

    root: Path
    config: dict
    files: dict[str, Path]  # tensor name -> file holding it
    _cache: dict[Path, Mapping[str, np.ndarray]] = field(default_factory=dict)
    # streamed: each tensor `gather` takes is passed here (to check its values), then dropped
    inspect: Callable[[str, np.ndarray], None] | None = None

    def _file(self, name: str) -> Mapping[str, np.ndarray]:
        path = self.files[name]
        if path not in self._cache:
            self._cache[path] = read_tensors(path)
        return self._cache[path]

    def tensor(self, name: str) -> np.ndarray:
        return self._file(name)[name]

    def kept(self, ours: str, tensor: np.ndarray,
             again: Callable[[], np.ndarray]) -> np.ndarray | Unread:
        """What a reader keeps of `tensor` (attndsl's `ours`): the tensor; streamed (with
        `inspect`), the tensor is inspected and an `Unread` that reads it `again` is kept."""
        if self.inspect is None:
            return tensor
        self.inspect(ours, tensor)
        return Unread(tuple(tensor.shape), again)

    def shape(self, name: str) -> tuple[int, ...]:
        found = self._file(name)
        if isinstance(found, _SafetensorsFile):
            return found.shape(name)  # from the header, without reading the data
        return tuple(found[name].shape)


def open_checkpoint(path: Path) -> Checkpoint | None:
    """A Hugging Face checkpoint at `path` (its folder, its model.safetensors or its index),
    or None when `path` is a plain attndsl weights file (no config.json beside it)."""
    if path.name == "config.json":  # the checkpoint's config names its folder
        path = path.parent
    folder = path if path.is_dir() else path.parent
    config_file = folder / "config.json"
    if not config_file.is_file():
        if path.is_dir():
            raise UsageError(f"{path}: a folder without config.json; --weights takes a Hugging "
                             "Face checkpoint folder or one weights file")
        return None
    config, _ = read_config(config_file)
    if path.is_dir():
        for name in ("model.safetensors.index.json", "model.safetensors",
                     "pytorch_model.bin.index.json", "pytorch_model.bin"):
            if (folder / name).is_file():
                path = folder / name
                break
        else:
            raise UsageError(f"{folder}: no model.safetensors, sharded index or "
                             "pytorch_model.bin")
    if path.name.endswith(".index.json"):
        return Checkpoint(folder, config, _shards(path, folder))
    tensors = read_tensors(path)
    return Checkpoint(folder, config, dict.fromkeys(tensors, path), {path: tensors})


# safetensors' type names -> NumPy's
_SAFETENSORS_TYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
                      "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
                      "U8": "uint8", "BOOL": "bool"}
_MAX_HEADER = 100 << 20  # bytes: the format's own limit


class _SafetensorsFile(Mapping[str, np.ndarray]):
    """A .safetensors file's tensors, each read when asked for. The format: an 8-byte
    little-endian header length n, n bytes of JSON header (name -> dtype, shape and
    data_offsets [begin, end) after the header), then the data. The header is checked whole
    when the file is opened: a type, shape or range that does not hold is a ValueError."""

    def __init__(self, path: Path):
        self._path = path
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ValueError("shorter than the 8 bytes of its header length")
            n = int.from_bytes(head, "little")
            if n > min(size - 8, _MAX_HEADER):
                raise ValueError(f"header length {n} runs past the end of the file")
            header = json.loads(f.read(n))
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
        self._start = 8 + n
        self._entries: dict[str, tuple[Any, tuple[int, ...], int]] = {}
        for name, entry in header.items():
            if name != "__metadata__":
                self._entries[name] = _entry(name, entry, size - self._start)
        _check_layout(header, size - self._start)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entries[name][1]

    def __getitem__(self, name: str) -> np.ndarray:
        dtype, shape, begin = self._entries[name]
        count = math.prod(shape)
        if count == 0:
            return np.zeros(shape, dtype)
        data = np.fromfile(self._path, dtype=np.dtype(dtype).newbyteorder("<"), count=count,
                           offset=self._start + begin)
        return data.astype(dtype, copy=False).reshape(shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _entry(name: str, entry: Any, data_size: int) -> tuple[Any, tuple[int, ...], int]:
    """(NumPy type, shape, first byte) of one header entry, or ValueError saying what is off."""
    if not isinstance(entry, dict):
        raise ValueError(f"`{name}` is not described by an object")
    kind, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(kind, str) or kind not in _SAFETENSORS_TYPES:
        raise ValueError(f"`{name}` has dtype {json.dumps(kind)}, which attndsl cannot read")
    if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ValueError(f"`{name}` has shape {json.dumps(shape)}: expected a list of sizes")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(
            isinstance(o, int) and not isinstance(o, bool) for o in offsets) or not (
            0 <= offsets[0] <= offsets[1] <= data_size):
        raise ValueError(f"`{name}` has data_offsets {json.dumps(offsets)}: expected [begin, "
                         f"end] within the file's {data_size} bytes of data")
    dtype = numpy_dtype(_SAFETENSORS_TYPES[kind])
    if math.prod(shape) * np.dtype(dtype).itemsize != offsets[1] - offsets[0]:
        raise ValueError(f"`{name}`: shape {shape} of {kind} does not fill its "
                         f"{offsets[1] - offsets[0]} bytes")
    return dtype, tuple(shape), offsets[0]


def _check_layout(header: dict, data_size: int) -> None:
    """The data section as the format and its reference reader (the safetensors library)
    require it: the tensors' byte ranges, in order, tile it exactly, from its first byte to the
    end of the file; overlapping tensors (one byte read as two tensors), gaps and trailing
    bytes are refused as that reader refuses them."""
    ranges = sorted((tuple(e["data_offsets"]), name) for name, e in header.items()
                    if name != "__metadata__")
    end, before, gap = 0, None, None
    for (begin, stop), name in ranges:
        if begin < end:  # the worse fault first: bytes read as two tensors
            raise ValueError(f"`{name}` has data_offsets {[begin, stop]}, which overlap "
                             f"`{before}`'s: the tensors must fill the data section one "
                             "after another")
        if begin > end and gap is None:
            gap = (f"`{name}` has data_offsets {[begin, stop]}, which leave bytes "
                   f"{end}..{begin} of the data unused: the tensors must fill the data "
                   "section one after another")
        end, before = stop, name
    if gap is not None:
        raise ValueError(gap)
    if end != data_size:
        raise ValueError(f"its tensors end at byte {end} of its {data_size} bytes of data: "
                         "the file holds bytes no tensor describes")


def _shards(index: Path, folder: Path) -> dict[str, Path]:
    """tensor name -> shard file, from a sharded checkpoint's index: each shard a file inside
    the checkpoint's folder."""
    weight_map = read_json(index, "sharded checkpoint index")
    weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
    if not isinstance(weight_map, dict):
        raise UsageError(f"{index}: not a sharded checkpoint index (expected an object with "
                         "a `weight_map` object)")
    files, inside = {}, folder.resolve()
    for name, shard in weight_map.items():
        path = folder / shard if isinstance(shard, str) else None
        if path is None or not path.resolve().is_relative_to(inside) or path.is_dir():
            raise UsageError(f"{index}: `weight_map.{name}` = {json.dumps(shard)}: expected "
                             "the name of a shard file in the checkpoint's folder")
        files[name] = path
    return files


def read_tensors(path: Path) -> Mapping[str, np.ndarray]:
    """The tensors of one weights file as NumPy arrays (.safetensors, read lazily; else a
    torch state dict, memory-mapped where it can be, loaded without running code), or a
    SpecError naming the file for anything else."""
    try:
        if path.suffix == ".safetensors":
            return _SafetensorsFile(path)
        import torch

        try:  # zip-format .bin (torch >= 1.6): mapped, read on use
            found = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # the legacy format cannot be mapped
            found = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if why.startswith("Weights only load failed"):  # torch's advice is to run the code
            why = "not a tensor file that loads without running code"
        raise SpecError([Diagnostic(f"{path}: cannot read weights: {why}",
                                    hint="pass a .safetensors file or a torch state dict")]
                        ) from None
    if isinstance(found, dict) and isinstance(found.get("state_dict"), dict):
        found = found["state_dict"]
    if not isinstance(found, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in found.items()):
        raise SpecError([Diagnostic(f"{path}: expected a mapping of tensor names to tensors",
                                    hint="save with torch.save(module.state_dict(), path)")])
    return _TorchArrays(path, found)


class _TorchArrays(Mapping[str, np.ndarray]):
    """A torch state dict's tensors as NumPy arrays, each converted when asked for."""

    def __init__(self, path: Path, tensors: dict):
        self._path, self._tensors = path, tensors

    def __getitem__(self, name: str) -> np.ndarray:
        import torch

        t = self._tensors[name].detach()
        if t.dtype == torch.bfloat16:  # NumPy's bfloat16 is ml_dtypes': through its bits
            return t.view(torch.int16).numpy().view(numpy_dtype("bfloat16"))
        try:
            return t.numpy()
        except TypeError:  # a type NumPy lacks (float8, ...)
            raise SpecError([Diagnostic(
                f"{self._path}: tensor `{name}` is {t.dtype}, which attndsl cannot read",
                hint="store float32, float16 or bfloat16 tensors")]) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)
