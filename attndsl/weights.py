"""Weights files (`--weights`): .safetensors or a torch state dict (.pt/.pth/.bin), checked
against the names and shapes of docs/LANGUAGE.md (Weights). Every problem is reported at once,
naming the tensor and the expected shape (exit 2)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from .checkpoints import gather, open_checkpoint, read_tensors
from .errors import Diagnostic, SpecError, UsageError
from .spec import Layer

__all__ = ["load_into"]


def _check_values(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    problems = []
    for name, t in tensors.items():
        if not t.is_floating_point():
            problems.append(Diagnostic(f"{path}: tensor for `{name}` is {t.dtype}, expected a "
                                       "float tensor"))
        elif not bool(torch.isfinite(t).all()):
            problems.append(Diagnostic(f"{path}: tensor for `{name}` holds NaN or infinite "
                                       "values"))
    if problems:
        raise SpecError(problems)


def _read(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise UsageError(f"{path}: no such weights file")
    return dict(read_tensors(path))


def load_into(module: nn.Module, path: str | Path, spec: Layer | None = None,
              layer: int = 0) -> None:
    """Load `path` into `module`, strictly: no missing, unknown or misshapen tensors. A Hugging
    Face checkpoint (a folder with config.json, or a file beside one) is read through its
    family's name table (`checkpoints`), for the layers `spec` describes."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such weights file or folder")
    expected = module.state_dict()
    ckpt = open_checkpoint(path) if spec is not None else None
    if ckpt is not None:
        wanted = {k: tuple(v.shape) for k, v in expected.items()}
        tensors = gather(ckpt, spec, wanted, layer)
        _check_values(path, tensors)
        with torch.no_grad():
            module.load_state_dict({k: v.to(expected[k].dtype) for k, v in tensors.items()})
        return
    if path.is_dir():
        raise UsageError(f"{path}: is a folder without config.json; --weights takes one file "
                         "(.safetensors or a torch state dict) or a Hugging Face checkpoint")
    tensors = _read(path)
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
        elif not bool(torch.isfinite(tensors[name]).all()):
            bad = int((~torch.isfinite(tensors[name])).sum())
            problems.append(Diagnostic(
                f"{path}: tensor `{name}` holds {bad} NaN or infinite value(s)",
                hint="a model with them computes NaN everywhere; check how the file was made"))
    unknown = [name for name in tensors if name not in expected]
    missing = {name: tuple(want.shape) for name, want in expected.items()
               if name not in tensors}
    hints = _renames(unknown, missing, {n: tuple(tensors[n].shape) for n in unknown})
    for name in unknown:
        problems.append(Diagnostic(
            f"{path}: unknown tensor `{name}` ({list(tensors[name].shape)})",
            hint=f"did you mean `{hints[name]}`?" if name in hints else
            "names follow the spec's layers; see docs/LANGUAGE.md, Weights"))
    if problems:
        raise SpecError(problems)
    with torch.no_grad():
        module.load_state_dict({k: v.to(expected[k].dtype) for k, v in tensors.items()})


def _renames(unknown: list[str], missing: dict[str, tuple[int, ...]],
             shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """unknown name -> the missing name it surely is, or nothing: a wrong hint is worse than
    none (norms of one width, or q/k/v/o projections of one shape, all look alike).

    A hint is given only when one name ends with the other at a `.` boundary (a checkpoint's
    extra `model.` prefix, or a missing one), the shapes agree, and the pairing is one to one."""
    candidates: dict[str, list[str]] = {}
    for name in unknown:
        candidates[name] = [want for want, shape in missing.items() if shape == shapes[name]
                            and (name.endswith("." + want) or want.endswith("." + name))]
    claimed: dict[str, int] = {}
    for found in candidates.values():
        for want in found:
            claimed[want] = claimed.get(want, 0) + 1
    return {name: found[0] for name, found in candidates.items()
            if len(found) == 1 and claimed[found[0]] == 1}
