"""Reading a checkpoint's files: a Hugging Face folder (config.json, model.safetensors, a
sharded index or pytorch_model.bin), or one weights file; tensors are read when asked for.
Every damaged or hostile file is a diagnostic naming it (exit 2)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .errors import Diagnostic, SpecError, UsageError
from .hf_fields import read_config, read_json

__all__ = ["Checkpoint", "open_checkpoint", "read_tensors"]


@dataclass
class Checkpoint:
    """A checkpoint's tensors by name and its config. Files are opened once and tensors read
    one by one (safetensors) or memory-mapped (.bin): embeddings, heads and unpicked layers
    are never loaded."""

    root: Path
    config: dict
    files: dict[str, Path]  # tensor name -> file holding it
    _cache: dict[Path, Mapping[str, torch.Tensor]] = field(default_factory=dict)

    def tensor(self, name: str) -> torch.Tensor:
        path = self.files[name]
        if path not in self._cache:
            self._cache[path] = read_tensors(path)
        return self._cache[path][name]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.tensor(name).shape)


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


class _SafetensorsFile(Mapping[str, torch.Tensor]):
    """A .safetensors file's tensors, each read when asked for."""

    def __init__(self, path: Path):
        from safetensors import safe_open

        self._file = safe_open(str(path), framework="pt")
        self._names = list(self._file.keys())

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._names:
            raise KeyError(name)
        return self._file.get_tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


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


def read_tensors(path: Path) -> Mapping[str, torch.Tensor]:
    """The tensors of one weights file (.safetensors, read lazily; else a torch state dict,
    memory-mapped where it can be, loaded without running code), or a SpecError naming the
    file for anything else."""
    try:
        if path.suffix == ".safetensors":
            return _SafetensorsFile(path)
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
    return found
