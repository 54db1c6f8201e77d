"""Weights files (`--weights`): .safetensors or a torch state dict (.pt/.pth/.bin), checked
against the names and shapes DESIGN §3 documents. Every problem is reported at once, naming the
tensor and the expected shape (exit 2)."""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path

import torch
from torch import nn

from .errors import Diagnostic, SpecError, UsageError

__all__ = ["file_sha256", "load_into"]


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise UsageError(f"{path}: no such weights file")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return dict(load_file(str(path)))
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise SpecError([Diagnostic(f"{path}: cannot read weights: {str(exc).splitlines()[0]}",
                                    hint="pass a .safetensors file or a torch state dict")]
                        ) from None
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise SpecError([Diagnostic(f"{path}: expected a mapping of tensor names to tensors",
                                    hint="save with torch.save(module.state_dict(), path)")])
    return obj


def load_into(module: nn.Module, path: str | Path) -> None:
    """Load `path` into `module`, strictly: no missing, unknown or misshapen tensors."""
    path = Path(path)
    tensors = _read(path)
    expected = module.state_dict()
    problems: list[Diagnostic] = []
    for name, want in expected.items():
        if name not in tensors:
            problems.append(Diagnostic(
                f"{path}: missing tensor `{name}` (expected shape {list(want.shape)})"))
        elif tuple(tensors[name].shape) != tuple(want.shape):
            problems.append(Diagnostic(
                f"{path}: tensor `{name}` has shape {list(tensors[name].shape)}, expected "
                f"{list(want.shape)}"))
        elif not tensors[name].is_floating_point():
            problems.append(Diagnostic(
                f"{path}: tensor `{name}` is {tensors[name].dtype}, expected a float tensor"))
    for name in tensors:
        if name not in expected:
            close = difflib.get_close_matches(name, list(expected), n=1)
            problems.append(Diagnostic(
                f"{path}: unknown tensor `{name}` ({list(tensors[name].shape)})",
                hint=f"did you mean `{close[0]}`?" if close else
                "names follow the spec's layers; see docs/LANGUAGE.md, Weights"))
    if problems:
        raise SpecError(problems)
    with torch.no_grad():
        module.load_state_dict({k: v.to(expected[k].dtype) for k, v in tensors.items()})
