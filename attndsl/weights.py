"""Weights files (`--weights`): .safetensors or a torch state dict (.pt/.pth/.bin), checked
against the names and shapes of docs/LANGUAGE.md (Weights), or a Hugging Face checkpoint read
through its family's name table. Every problem is reported at once, naming the tensor and the
expected shape (exit 2). Read as NumPy arrays: torch is imported only for a torch state dict,
and to load a torch module (`load_into`)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoints import UnusedWeights, gather, open_checkpoint, read_tensors
from .errors import Diagnostic, SpecError, UsageError
from .spec import Layer

__all__ = ["Weights", "as_float64", "load_into", "read_weights"]


def as_float64(value: Any) -> np.ndarray:
    """A weight (a torch tensor or an array) as a float64 NumPy array: the oracle's."""
    if hasattr(value, "detach"):
        return value.detach().cpu().double().numpy()
    return np.asarray(value, dtype=np.float64)

_FLOATS = ("float32", "float16", "bfloat16", "float64")


def _float32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float32)  # exact from float16 and bfloat16


def _read_only32(a: np.ndarray) -> np.ndarray:
    """`a` as float32 without copying one that is: for an array only read, or read afresh."""
    return np.asarray(a).astype(np.float32, copy=False)


def _value_problem(path: Path, name: str, a: np.ndarray, what: str) -> Diagnostic | None:
    """A tensor that is not float, or that holds NaN or infinite values."""
    if a.dtype.name not in _FLOATS:
        return Diagnostic(f"{path}: tensor {what}`{name}` is {a.dtype.name}, expected a float "
                          "tensor")
    bad = int(a.size - np.isfinite(_read_only32(a)).sum())
    if bad:
        return Diagnostic(f"{path}: tensor {what}`{name}` holds {bad} NaN or infinite "
                          "value(s)", hint="a model with them computes NaN everywhere; check "
                          "how the file was made")
    return None


class Weights(Mapping[str, np.ndarray]):
    """Tensors by name, each read (from its file, converted) every time it is asked for and
    kept by nobody, so that an export holds one at a time however large the checkpoint;
    `shape(name)` without reading it."""

    def __init__(self, readers: dict[str, Callable[[], np.ndarray]],
                 shapes: dict[str, tuple[int, ...]]):
        self._readers, self._shapes = readers, shapes

    @classmethod
    def of(cls, arrays: Mapping[str, np.ndarray],
           convert: Callable[[np.ndarray], np.ndarray]) -> Weights:
        """`convert(arrays[name])` for each name, computed when asked for (same shape)."""
        shapes = {name: arrays.shape(name) if isinstance(arrays, Weights) else
                  tuple(np.shape(arrays[name])) for name in arrays}
        return cls({name: lambda name=name: convert(arrays[name]) for name in arrays}, shapes)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[name]

    def __getitem__(self, name: str) -> np.ndarray:
        return self._readers[name]()

    def __iter__(self) -> Iterator[str]:
        return iter(self._readers)

    def __len__(self) -> int:
        return len(self._readers)


def seeded(table: tuple[Any, ...], seed: int) -> Weights:
    """`weight_table.seeded_weights`, each weight drawn when asked for: one pass records the
    generator's state before each weight (drawing it and dropping it), and each read restores
    that state and draws the weight again."""
    from .weight_table import draw

    rng, states = np.random.default_rng(seed), {}
    for w in table:
        states[w.name] = rng.bit_generator.state
        draw(rng, w)

    def read(w: Any) -> np.ndarray:
        again = np.random.Generator(np.random.PCG64())
        again.bit_generator.state = states[w.name]
        return draw(again, w)
    return Weights({w.name: lambda w=w: read(w) for w in table},
                   {w.name: tuple(w.shape) for w in table})


def in_memory(source: Any) -> dict[str, np.ndarray] | None:
    """The tensors of a trained torch module (its `state_dict()`) or of a mapping of names to
    tensors or arrays, as NumPy arrays; None for a path."""
    if hasattr(source, "state_dict"):
        source = source.state_dict()
    if not hasattr(source, "items"):
        return None
    return {k: v.detach().cpu().float().numpy() if hasattr(v, "detach") else np.asarray(v)
            for k, v in source.items()}


def fingerprint(arrays: dict[str, np.ndarray]) -> str:
    """sha256 of in-memory weights (names, shapes, float32 values in name order): what a
    model compiled from them records in place of a file's hash."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name], dtype=np.float32)
        digest.update(f"{name}{list(a.shape)}".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def read_weights(path: Any, wanted: dict[str, tuple[int, ...]],
                 spec: Layer | None = None, layer: int = 0,
                 streamed: bool = False) -> Mapping[str, np.ndarray]:
    """float32 arrays for `wanted` (name -> shape) from `path`, strictly: no missing, unknown,
    misshapen, non-float or non-finite tensors. A Hugging Face checkpoint (a folder with
    config.json, or a file beside one) is read through its family's name table
    (`checkpoints`), for the layers `spec` describes; a trained module or a mapping of names
    to tensors (`in_memory`) is checked alike. `streamed`: files are checked tensor by
    tensor, then read again when asked for (`Weights`): never all in memory at once."""
    arrays = in_memory(path)
    if arrays is not None:
        return _checked(Path("the given weights"), arrays, wanted)
    allowed = path if isinstance(path, UnusedWeights) else None  # allow_unused_weights
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such weights file or folder")
    ckpt = open_checkpoint(path) if spec is not None else None
    if ckpt is not None:
        problems: list[Diagnostic] = []
        if streamed:  # each tensor checked as gather reads it, then dropped

            def inspect(name: str, a: np.ndarray) -> None:
                if (p := _value_problem(path, name, a, "for ")) is not None:
                    problems.append(p)
            ckpt.inspect = inspect
        tensors = gather(ckpt, spec, wanted, layer, allow_unused=allowed is not None,
                         warn=allowed and allowed.tell)
        if not streamed:
            problems = [p for name, a in tensors.items()
                        if (p := _value_problem(path, name, a, "for ")) is not None]
        if problems:
            raise SpecError(problems)
        if streamed:
            return Weights({k: lambda u=u: _read_only32(u.read()) for k, u in tensors.items()},
                           {k: u.shape for k, u in tensors.items()})
        return {k: _float32(v) for k, v in tensors.items()}
    if path.is_dir():
        raise UsageError(f"{path}: is a folder without config.json; --weights takes one file "
                         "(.safetensors or a torch state dict) or a Hugging Face checkpoint")
    return _checked(path, read_tensors(path), wanted, streamed, allowed)


def _checked(path: Path, found: Mapping[str, np.ndarray], wanted: dict[str, tuple[int, ...]],
             streamed: bool = False,
             allowed: UnusedWeights | None = None) -> Mapping[str, np.ndarray]:
    """`found` as float32 arrays for `wanted`, or SpecError naming every missing, unknown,
    misshapen, non-float or non-finite tensor (`allowed`: unknown ones are left out, named in
    its warning)."""
    shape = getattr(found, "shape", None)  # a .safetensors file's, from its header: unread
    shapes = {name: tuple(shape(name) if callable(shape) else found[name].shape)
              for name in found}
    problems: list[Diagnostic] = []
    for name, want in wanted.items():
        if name not in found:
            problems.append(Diagnostic(
                f"{path}: missing tensor `{name}` (expected shape {list(want)})"))
        elif shapes[name] != tuple(want):
            problems.append(Diagnostic(
                f"{path}: tensor `{name}` has shape {list(shapes[name])}, expected "
                f"{list(want)}"))
        elif (p := _value_problem(path, name, found[name], "")) is not None:
            problems.append(p)
    unknown = [name for name in found if name not in wanted]
    missing = {name: tuple(want) for name, want in wanted.items() if name not in found}
    hints = _renames(unknown, missing, {n: shapes[n] for n in unknown})
    if allowed is not None and unknown:
        allowed.tell(f"{path}: left out, as not used by the spec: "
                     + "; ".join(f"`{n}` {list(shapes[n])}" for n in unknown))
        unknown = [n for n in unknown if n in hints]  # a misnamed tensor is still missing
    for name in unknown:
        problems.append(Diagnostic(
            f"{path}: unknown tensor `{name}` ({list(shapes[name])})",
            hint=f"did you mean `{hints[name]}`?" if name in hints else
            "names follow the spec's layers; see docs/LANGUAGE.md, Weights"))
    if problems:
        raise SpecError(problems)
    if streamed:  # read again when used (a file's tensors are read when asked for)
        return Weights({name: lambda name=name: _read_only32(found[name]) for name in wanted},
                       {name: tuple(want) for name, want in wanted.items()})
    return {name: _float32(found[name]) for name in wanted}


def load_into(module: Any, path: Any, spec: Layer | None = None,
              layer: int = 0) -> None:
    """Load `path` (or a trained module's tensors) into the torch `module`, as
    `read_weights` reads it for the module's tensors."""
    import torch

    expected = module.state_dict()
    arrays = read_weights(path, {k: tuple(v.shape) for k, v in expected.items()}, spec, layer)
    with torch.no_grad():
        module.load_state_dict({k: torch.from_numpy(v).to(expected[k].dtype)
                                for k, v in arrays.items()})


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
