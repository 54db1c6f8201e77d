"""Equivalence: random inputs at several shapes through the NumPy reference, the torch module
and ONNX Runtime; a Polygraphy-style report of max abs / rel error per backend and shape.

Tolerance (README, Commands), float32: max |a - ref| <= 1e-4 * max(1, max |ref|); float16 and
bfloat16: 2e-2 * max(1, max |ref|). For half-precision models the inputs are drawn in float32
and rounded to the dtype, and the float64 reference runs on the rounded weights and inputs, so
the error measured is the computation's, not the rounding of what it was given."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .backends import reference
from .dtypes import round_to, torch_dtype
from .ir import build
from .limits import beyond_limits, length_limits
from .masks import Chunked, Dilated, Global, Prefix, Random, Strided, Window, primitives
from .mechanisms import ffn_of, kernel_of, selector_of
from .patches import image_shape, patch_counts
from .spec import (
    MAX_LENGTH,
    Attention,
    RelativeBias,
    RelativeLogits,
    Rope,
    Transformer,
    attentions_of,
    input_names,
    memory_reader,
    output_name,
    reads_streams,
)
from .verify_report import Comparison, Report
from .weights import as_float64

if TYPE_CHECKING:  # torch is imported where it runs: `show` reads mask_lengths without it
    import torch

__all__ = ["DEFAULT_LENGTHS", "Comparison", "Report", "default_lengths", "make_inputs",
           "mask_lengths", "memory_length", "reference_bytes", "tolerance", "verify",
           "verify_layer", "weights_source"]

DEFAULT_LENGTHS = (1, 7, 61, 293)  # one token, and primes: no multiple of any block
DEFAULT_BATCHES = (1, 3)
TOLERANCE = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 2e-2}
# The reference forms each softmax core's scores as float64 [B, H, L, S] tensors, about eight
# of them at its peak (measured: 5-8 x 8 bytes a pair), and as many copies of each token's
# widest activation; torch (float32) and ONNX Runtime need less. A shape whose reference would
# need more than VERIFY_MEMORY is skipped, with the reason.
REFERENCE_BYTES_PER_PAIR = 64
VERIFY_MEMORY = 6 * 1024**3


def tolerance(ref: np.ndarray, dtype: str = "float32") -> float:
    return TOLERANCE[dtype] * max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)


def default_lengths(spec: Attention | Transformer) -> dict[int, str]:
    """The lengths `verify` checks unless told, each with why: 1, primes (no multiple of any
    block), the first prime past every extent the spec names (a window's keys, a chunk, a
    block, a stride, global and prefix tokens, random blocks, T5's max_distance, a RoPE
    scaling's original_max_position), both sides of original_max_position, a kernel module's
    own lengths (`Kernel.lengths`) and a core selector's (`Selector.lengths`: both sides of
    every threshold). Lengths past
    a limit (limits.length_limits) or MAX_LENGTH are left out."""
    chosen = {1: "one token", DEFAULT_LENGTHS[1]: "a prime below every block",
              DEFAULT_LENGTHS[2]: "a prime", DEFAULT_LENGTHS[3]: "a prime"}
    if getattr(spec, "patches", None) is not None:  # a vision stack's: counts of patches
        chosen = patch_counts(spec.patches)
    for a in attentions_of(spec):
        for n, why in mask_lengths(a).items():
            chosen.setdefault(n, why)
        for core in a.cores:
            position = core.position
            if isinstance(position, Rope) and position.scaling is not None and \
                    hasattr(position.scaling, "original_max_position"):
                n = position.scaling.original_max_position  # dynamic, longrope switch here
                chosen.setdefault(n, f"RoPE scaling's original_max_position ({n})")
                _prime_past(chosen, n, f"original_max_position ({n})")
            if isinstance(position, RelativeBias):
                d = position.max_distance
                _prime_past(chosen, d, f"T5's max_distance ({d})")
            if isinstance(position, RelativeLogits):
                e = position.extent
                _prime_past(chosen, e, f"the relative logits' extent ({e})")
            if core.sparsity.block:
                b = core.sparsity.block
                _prime_past(chosen, 2 * b, f"two blocks of {b}")
            kernel = kernel_of(core.kernel)
            for n, why in (kernel.lengths(core.kernel) if kernel else {}).items():
                chosen.setdefault(n, why)
        selector = selector_of(a.variants)
        for n, why in (selector.lengths(a) if selector else {}).items():
            chosen.setdefault(n, why)
    limits = length_limits(spec)
    return {n: chosen[n] for n in sorted(chosen) if n <= MAX_LENGTH and beyond_limits(
        limits, n, memory_length(n) if "memory_length" in limits else None) is None}


def mask_lengths(attention: Attention) -> dict[int, str]:
    """The first prime past every extent the masks of one attention name (a window's keys, a
    chunk, global and prefix tokens, random blocks, a stride), each with why: the shortest
    lengths at which each shows its edge (`verify` checks them, `show` draws the longest)."""
    out: dict[int, str] = {}
    for core in attention.cores:
        for mask in primitives(core.mask):
            for n, what in _extents(mask):
                _prime_past(out, n, what)
    return out


def _prime_past(chosen: dict[int, str], n: int, what: str) -> None:
    """Adds the first prime past `n` (unless chosen already), saying it is past `what`."""
    if n < MAX_LENGTH:  # beyond, no model runs (and a prime search would not end)
        chosen.setdefault(_next_prime(n + 1), f"the first prime past {what}")


def _extents(mask) -> list[tuple[int, str]]:
    """The lengths a mask primitive names, and how to say each."""
    match mask:
        case Window(left, right, _):
            return [(left + right + 1, f"the window's {left + right + 1} keys")]
        case Dilated(left, right, dilation):
            return [((left + right) * dilation + 1, "the dilated window's span")]
        case Chunked(n):
            return [(n, f"a chunk of {n}")]
        case Strided(n):
            return [(2 * n, f"two strides of {n}")]
        case Global(first, tokens):
            return [(max((first, *tokens)), "the global tokens")]
        case Prefix(n):
            return [(n, f"the prefix of {n}")]
        case Random(blocks, block, _):
            return [((blocks + 1) * block, f"{blocks + 1} random blocks of {block}")]
    return []


def _next_prime(n: int) -> int:
    """The smallest prime >= n."""
    while n < 2 or any(n % d == 0 for d in range(2, math.isqrt(n) + 1)):
        n += 1
    return n


def reference_bytes(spec: Attention | Transformer, batch: int, length: int,
                    memory: int | None) -> int:
    """What the reference needs at this shape: softmax cores (the one that serves this
    length, where a selector chooses) form [B, H, L, S] scores, kernel modules without
    `scores` do not; and every token carries activations as wide as the widest projection,
    FFN or vocabulary."""
    S = memory if memory is not None else length
    pairs, width = 0, 0
    for a in attentions_of(spec):
        selector = selector_of(a.variants)
        core = a if selector is None else selector.serving(a, length)
        kernel = kernel_of(core.kernel)
        if kernel is None or kernel.scores:
            pairs = max(pairs, batch * core.heads * length * S)
        width = max(width, a.d_model, a.memory_dim, a.heads * max(a.head_dim, a.value_dim))
    if isinstance(spec, Transformer):
        form = spec.feed_forward
        cut = spec.shortcut_form  # (a shortcut's MLPs too)
        mlps = (spec.ffn, *(ffn_of(form).mlps(form) if form is not None else ()),
                spec.shortcut, *(ffn_of(cut).mlps(cut) if cut is not None else ()))
        width = max(width, spec.vocab or 0,
                    *(f.hidden * (2 if f.gated else 1) for f in mlps if f is not None))
    tokens = batch * max(length, S)
    return REFERENCE_BYTES_PER_PAIR * (pairs + tokens * width)


def memory_length(L: int) -> int:
    """S for cross attention at query length L: sometimes shorter, sometimes longer than L."""
    return {1: 4, 7: 3, 64: 97, 300: 211}.get(L, L + 13 if L % 2 else max(1, L - 5))


def make_inputs(spec: Attention | Transformer, batch: int, length: int, rng: np.random.Generator,
                ) -> dict[str, np.ndarray]:
    """Random inputs for one shape. Padding lengths include 0 (rows with no key) and the full
    length; document ids are sorted runs, as packed sequences are."""
    attn = spec.attention if isinstance(spec, Transformer) else spec
    reader = memory_reader(spec)  # (a cross attention, or a decoder stack's)
    S = memory_length(length) if reader is not None else length
    out: dict[str, np.ndarray] = {}
    for name in input_names(spec):
        if name == "x":
            out[name] = rng.standard_normal((batch, length, attn.d_model)).astype(np.float32)
        elif name == "input_ids":
            out[name] = rng.integers(0, spec.vocab, size=(batch, length)).astype(np.int64)
        elif name == "pixel_values":  # a vision stack's image of `length` patches
            image = (batch, spec.patches.channels, *image_shape(spec.patches, length))
            out[name] = rng.standard_normal(image).astype(np.float32)
        elif name == "memory":
            out[name] = rng.standard_normal((batch, S, reader.memory_dim)).astype(np.float32)
        elif name in ("key_lengths", "memory_lengths"):  # (a stack's key_lengths: its tokens')
            n = length if name == "key_lengths" and isinstance(spec, Transformer) else S
            lengths = rng.integers(0, n + 1, size=batch)
            lengths[0] = n
            if batch > 2:
                lengths[-1] = 0
            out[name] = lengths.astype(np.int64)
        elif name == "position_ids":  # multimodal RoPE's streams: each its own positions
            n = reads_streams(spec)  # (rows and columns, 2: a grid's, about sqrt(L) a side)
            top = 2 * length + 1 if n == 3 else math.isqrt(length) + 3
            out[name] = rng.integers(0, top, size=(n, batch, length)).astype(np.int64)
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


def _quantization_error(batch: int, length: int, S: int | None, ref: np.ndarray,
                        full: np.ndarray, spec, quantize) -> Comparison:
    """The reference on the dequantized weights against it on the float ones: what the
    quantization itself changes (an INFO row: reported, neither passed nor failed)."""
    err = float(np.abs(ref - full).max()) if ref.size else 0.0
    note = f"int{quantize.bits} weights vs float32"
    if getattr(spec, "vocab", None):
        agree = float((ref.argmax(-1) == full.argmax(-1)).mean())
        note += f"; top-1 agreement {100 * agree:.1f}%"
    return Comparison(batch, length, S, "quantization", err,
                      err / max(float(np.abs(full).max()), 1e-30), math.nan, None, note, "info")


def verify(spec: Attention | Transformer, module: torch.nn.Module, weights: dict[str, np.ndarray],
           runners: Sequence[tuple[str, Callable[[dict[str, np.ndarray]], np.ndarray]]], *,
           targets: tuple[str, ...], seed: int,
           lengths: Mapping[int, str] | Iterable[int] | None = None,
           batches: Iterable[int] = DEFAULT_BATCHES, dtype: str = "float32",
           progress: Callable[[str], None] | None = None, quantize=None,
           float_weights: dict[str, np.ndarray] | None = None) -> Report:
    """Compare torch and every runner (e.g. ONNX Runtime per provider) against the reference.
    A quantized export (`quantize`; `weights` then the dequantized ones) whose MatMulNBits
    quantize activations (accuracy_level >= 1) is held to the half-precision tolerance, and
    the quantization's own error,
    the reference on `weights` against it on `float_weights`, is reported apart (an INFO row,
    not counted: max error, and for logits the top-1 agreement). A shape that cannot run
    (past a length limit, or a reference too large) is a SKIPPED row, not counted either."""
    import torch

    graph = build(spec)
    # activations quantized (accuracy_level >= 1): the half-precision tolerance
    tol_dtype = dtype if quantize is None or not quantize.accuracy else "float16"
    if lengths is None:
        lengths = default_lengths(spec)
    why = dict(lengths) if isinstance(lengths, Mapping) else dict.fromkeys(lengths, "asked for")
    report = Report(spec.name, targets, dtype, seed, dict(sorted(why.items())))
    limits = length_limits(spec)
    rng = np.random.default_rng(seed)
    module = module.eval()
    shapes = [(b, L) for L in report.why for b in batches]
    for i, (batch, length) in enumerate(shapes):
        if progress:
            progress(f"verify {spec.name}: B={batch}, L={length}", i, len(shapes))
        S = memory_length(length) if "memory" in input_names(spec) else None
        skip = beyond_limits(limits, length, S)
        need = reference_bytes(spec, batch, length, S)
        if not skip and need > VERIFY_MEMORY:
            skip = (f"the reference's float64 L x S scores would need ~{need / 1e9:.0f} GB "
                    f"(verify stays under {VERIFY_MEMORY / 1e9:.1f} GB)"
                    + ("; --batches 1 would fit" if reference_bytes(spec, 1, length, S)
                       <= VERIFY_MEMORY else "; `attndsl bench` measures this length"))
        if skip:
            report.comparisons.append(Comparison(
                batch, length, S, "all", math.nan, math.nan, math.nan, None, skip, "skipped"))
            continue
        inputs = make_inputs(spec, batch, length, rng)  # after the skip: it could not fit
        if dtype != "float32":  # values the model can hold (exact in float32)
            inputs = {k: round_to(v, dtype).astype(np.float32) if v.dtype.kind == "f" else v
                      for k, v in inputs.items()}
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
                                                 *_compare(ref, outputs[name], tol_dtype)))
        if float_weights is not None:
            report.comparisons.append(_quantization_error(
                batch, length, S, ref, reference.run(graph, inputs, float_weights),
                spec, quantize))
        for name, y in outputs.items():
            report.outputs.setdefault(name, []).append({output_name(spec): y})
    return report




def verify_layer(layer, *, lengths=None, batches=None, providers: tuple[str, ...] = ("cpu",),
                 targets: tuple[str, ...] | None = None, seed: int = 0, weights=None,
                 dtype: str = "float32", progress=None, quantize=None) -> Report:
    """`Layer.verify` (api.Layer, its arguments): checked before the slow export, then the
    torch module and each target's export per provider against the reference. The report
    names where the weights came from (`weights_source`); the seed then draws the inputs."""
    from .backends import runtime
    from .quantize import check_quantization
    from .targets import check_dtype_target, get, verify_pairs
    from .usage import check_dtype, check_ints, check_target

    check_dtype(dtype)
    check_ints("seed", (seed,), 0, 2**63 - 1)
    check_ints("lengths", tuple(lengths or ()), 1, MAX_LENGTH)
    check_ints("batches", tuple(batches or ()), 1, 1 << 16)
    for provider in providers:  # fail before the slow export, not after
        runtime.require(provider)
    on: dict[str, tuple[str, ...]] = {}  # target -> its providers
    for target, provider in verify_pairs(targets, providers):
        on[target] = (*on.get(target, ()), provider)
    if quantize is not None and targets is None:  # MatMulNBits: planned targets only
        on = {t: p for t, p in on.items() if get(t).planned}
    for target, its_providers in on.items():
        check_target(target)
        check_dtype_target(dtype, target, its_providers)
        check_quantization(quantize, target, dtype)
    module = layer.to_torch(seed=seed, weights=weights, dtype=dtype)
    float_state = None
    if quantize is not None:  # torch and the oracle on what the quantized model holds
        from .quantize import dequantized, quantized_weights
        from .weights import load_into

        float_state = {k: as_float64(v) for k, v in module.state_dict().items()}
        names = quantized_weights(layer.graph(), quantize)
        load_into(module, dequantized(float_state, names, quantize))
    runners = []
    for target, its_providers in on.items():
        exported = layer.onnx_model(target=target, seed=seed, weights=weights, dtype=dtype,
                                    quantize=quantize)
        for provider in its_providers:
            session = runtime.make_session(exported, provider, profile=provider == "cuda")
            runners.append((f"{target} on {provider}", runtime.checked_runner(session)))
    state = {k: as_float64(v) for k, v in module.state_dict().items()}
    report = verify(layer.spec, module, state, runners, targets=tuple(on), seed=seed,
                    lengths=lengths or None, batches=batches or DEFAULT_BATCHES, dtype=dtype,
                    progress=progress, quantize=quantize, float_weights=float_state)
    report.weights = weights_source(weights)  # the header says it, not a seed that drew none
    return report


def weights_source(weights) -> str | None:
    """How a report names `weights`: a file or folder by its path (allow_unused_weights' too),
    a trained module or a state dict as such; None where the seed drew them."""
    if weights is None:
        return None
    if hasattr(weights, "state_dict"):
        return "a module's tensors"
    if hasattr(weights, "items"):
        return "a state dict"
    return os.fspath(weights)
