"""Equivalence: random inputs at several shapes through the NumPy reference, the torch module
and ONNX Runtime; a Polygraphy-style report of max abs / rel error per backend and shape.

Tolerance (README, Commands), float32: max |a - ref| <= 1e-4 * max(1, max |ref|); float16 and
bfloat16: 2e-2 * max(1, max |ref|). For half-precision models the inputs are drawn in float32
and rounded to the dtype, and the float64 reference runs on the rounded weights and inputs, so
the error measured is the computation's, not the rounding of what it was given."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from .backends import reference
from .dtypes import round_to, torch_dtype
from .ir import build
from .spec import (
    Attention,
    Learned,
    LinformerKernel,
    LshKernel,
    Transformer,
    attentions_of,
    input_names,
    output_name,
)

__all__ = ["DEFAULT_LENGTHS", "Comparison", "Report", "make_inputs", "memory_length",
           "threshold_lengths", "tolerance", "verify"]

DEFAULT_LENGTHS = (1, 7, 64, 300)
DEFAULT_BATCHES = (1, 3)
TOLERANCE = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 2e-2}


def tolerance(ref: np.ndarray, dtype: str = "float32") -> float:
    return TOLERANCE[dtype] * max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)


def threshold_lengths(spec: Attention | Transformer) -> tuple[int, ...]:
    """Both sides of every by_length threshold n: n (the shorter variant's last length) and
    n + 1 (the next variant's first); and of an LSH kernel's chunk c: c (one chunk per round)
    and c + 1 (two, the second one slot)."""
    bounds = {v.up_to for a in attentions_of(spec) for v in a.variants if v.up_to is not None}
    bounds |= {a.kernel.chunk for a in attentions_of(spec) if isinstance(a.kernel, LshKernel)}
    return tuple(sorted({m for n in bounds for m in (n, n + 1)}))


def memory_length(L: int) -> int:
    """S for cross attention at query length L: sometimes shorter, sometimes longer than L."""
    return {1: 4, 7: 3, 64: 97, 300: 211}.get(L, L + 13 if L % 2 else max(1, L - 5))


@dataclass(frozen=True)
class Comparison:
    batch: int
    length: int
    memory_length: int | None
    backend: str  # "torch", or "<target> on <provider>" for ONNX Runtime
    max_abs: float
    max_rel: float
    tolerance: float
    passed: bool
    note: str = ""

    @property
    def shape(self) -> str:
        s = f"B={self.batch} L={self.length}"
        return s + (f" S={self.memory_length}" if self.memory_length is not None else "")


@dataclass
class Report:
    layer: str
    targets: tuple[str, ...]
    dtype: str
    seed: int
    comparisons: list[Comparison] = field(default_factory=list)
    # per shape: the inputs, and each backend's output (kept for --save-inputs/--save-outputs)
    feeds: list[dict[str, np.ndarray]] = field(default_factory=list, repr=False)
    outputs: dict[str, list[dict[str, np.ndarray]]] = field(default_factory=dict, repr=False)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.comparisons)

    def text(self) -> str:
        head = f"{'shape':<20} {'backend vs reference':<24} {'max abs':>10} {'max rel':>10} " \
               f"{'tolerance':>10}  verdict"
        lines = [f"verify {self.layer} (targets {', '.join(self.targets)}; {self.dtype}; "
                 f"seed {self.seed})",
                 head, "-" * len(head)]
        for c in self.comparisons:
            verdict = "PASS" if c.passed else "FAIL"
            lines.append(f"{c.shape:<20} {c.backend:<24} {c.max_abs:>10.3e} {c.max_rel:>10.3e} "
                         f"{c.tolerance:>10.3e}  {verdict}{'  ' + c.note if c.note else ''}")
        ok = sum(c.passed for c in self.comparisons)
        lines.append(f"{'PASSED' if self.passed else 'FAILED'}: {ok} of "
                     f"{len(self.comparisons)} comparisons within tolerance")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"layer": self.layer, "targets": list(self.targets), "dtype": self.dtype,
                "seed": self.seed, "passed": self.passed,
                "comparisons": [asdict(c) | {"shape": c.shape} for c in self.comparisons]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def make_inputs(spec: Attention | Transformer, batch: int, length: int, rng: np.random.Generator,
                ) -> dict[str, np.ndarray]:
    """Random inputs for one shape. Padding lengths include 0 (rows with no key) and the full
    length; document ids are sorted runs, as packed sequences are."""
    attn = spec.attention if isinstance(spec, Transformer) else spec
    S = memory_length(length) if attn.kind == "cross" else length
    out: dict[str, np.ndarray] = {}
    for name in input_names(spec):
        if name == "x":
            out[name] = rng.standard_normal((batch, length, attn.d_model)).astype(np.float32)
        elif name == "input_ids":
            out[name] = rng.integers(0, spec.vocab, size=(batch, length)).astype(np.int64)
        elif name == "memory":
            out[name] = rng.standard_normal((batch, S, attn.memory_dim)).astype(np.float32)
        elif name == "key_lengths":
            lengths = rng.integers(0, S + 1, size=batch)
            lengths[0] = S
            if batch > 2:
                lengths[-1] = 0
            out[name] = lengths.astype(np.int64)
        else:  # segment ids; a cross attention's memory rows get ids of the same documents
            docs = rng.integers(1, 4)
            n = S if name == "memory_segment_ids" else length
            out[name] = np.sort(rng.integers(0, docs, size=(batch, n)), axis=1).astype(np.int64)
    return out


def _compare(ref: np.ndarray, got: np.ndarray, dtype: str) -> tuple[float, float, float, bool]:
    if got.shape != ref.shape:
        return math.inf, math.inf, tolerance(ref, dtype), False
    got64 = got.astype(np.float64)
    if not np.all(np.isfinite(got64)):
        return math.nan, math.nan, tolerance(ref, dtype), False
    err = float(np.abs(got64 - ref).max()) if ref.size else 0.0
    scale = max(float(np.abs(ref).max()) if ref.size else 0.0, 1e-30)
    tol = tolerance(ref, dtype)
    return err, err / scale, tol, err <= tol


def verify(spec: Attention | Transformer, module: torch.nn.Module, weights: dict[str, np.ndarray],
           runners: Sequence[tuple[str, Callable[[dict[str, np.ndarray]], np.ndarray]]], *,
           targets: tuple[str, ...], seed: int, lengths: Iterable[int] = DEFAULT_LENGTHS,
           batches: Iterable[int] = DEFAULT_BATCHES, dtype: str = "float32",
           progress: Callable[[str], None] | None = None) -> Report:
    """Compare torch and every runner (e.g. ONNX Runtime per provider) against the reference."""
    graph = build(spec)
    report = Report(spec.name, targets, dtype, seed)
    def too_long(length: int) -> str | None:
        """Why the layer cannot run at this length, or None."""
        for a in attentions_of(spec):
            if isinstance(a.position, Learned) and length > a.position.max_len:
                return f"L exceeds learned positions ({a.position.max_len})"
            keys = memory_length(length) if a.kind == "cross" else length
            if isinstance(a.kernel, LinformerKernel) and keys > a.kernel.max_len:
                return f"{keys} keys exceed Linformer's max_len ({a.kernel.max_len})"
        return None

    rng = np.random.default_rng(seed)
    module = module.eval()
    shapes = [(b, L) for L in sorted(set(lengths)) for b in batches]
    for i, (batch, length) in enumerate(shapes):
        if progress:
            progress(f"{spec.name}: shape {i + 1}/{len(shapes)} (B={batch}, L={length})")
        inputs = make_inputs(spec, batch, length, rng)
        if dtype != "float32":  # values the model can hold (exact in float32)
            inputs = {k: round_to(v, dtype).astype(np.float32) if v.dtype.kind == "f" else v
                      for k, v in inputs.items()}
        S = inputs["memory"].shape[1] if "memory" in inputs else None
        skip = too_long(length)
        if skip:
            report.comparisons.append(Comparison(
                batch, length, S, "all", math.nan, math.nan, math.nan, True, f"skipped: {skip}"))
            continue
        ref = reference.run(graph, inputs, weights)
        with torch.no_grad():
            got = module(**{k: torch.from_numpy(v).to(torch_dtype(dtype))
                            if v.dtype.kind == "f" else torch.from_numpy(v)
                            for k, v in inputs.items()}).float().numpy()
        report.feeds.append(inputs)
        outputs = {"attndsl-reference": ref.astype(np.float32), "torch": got}
        report.comparisons.append(Comparison(batch, length, S, "torch",
                                             *_compare(ref, got, dtype)))
        for name, run in runners:
            outputs[name] = run(inputs)
            report.comparisons.append(Comparison(batch, length, S, name,
                                                 *_compare(ref, outputs[name], dtype)))
        for name, y in outputs.items():
            report.outputs.setdefault(name, []).append({output_name(spec): y})
    return report


