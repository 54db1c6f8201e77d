"""Weight-only quantization (`compile --quantize int4|int8`): every projection's weight W [N,
K] (out, in) stored as ONNX Runtime's MatMulNBits stores it, in blocks of `block` inputs per
output, and the arithmetic the oracle reads back (docs/QUANTIZATION.md). The blocks are made
by onnxruntime.quantization's own MatMulNBits quantizer (its C++ block quantizer), so a model
holds exactly what ONNX Runtime's tooling would write; `dequantize` is the documented reading
of them, NumPy alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["BLOCKS", "Quantization", "Quantized", "block_shapes", "check_quantization",
           "dequantize", "dequantized", "quantize", "quantized_weights"]

BLOCKS = (16, 32, 64, 128, 256)  # the block sizes MatMulNBits takes


@dataclass(frozen=True)
class Quantization:
    """bits 4 or 8; `block` inputs per scale; symmetric (zero point 2^(bits-1)) or not (a
    zero point per block); `accuracy`: MatMulNBits' accuracy_level (0: activations in the
    model's float type; 4: activations quantized to int8 per block, ONNX Runtime's fastest
    CPU path)."""

    bits: int
    block: int = 32
    symmetric: bool = True
    accuracy: int = 4

    def text(self) -> str:
        return (f"int{self.bits}, block {self.block}, "
                f"{'symmetric' if self.symmetric else 'asymmetric'}, "
                f"accuracy_level {self.accuracy}")


@dataclass(frozen=True)
class Quantized:
    """One weight as MatMulNBits takes it: `data` uint8 [N, K / block, block bits / 8],
    `scales` [N, K / block] (float32), `zero_points` uint8 [N, ceil(K / block / per byte)]
    or None (symmetric)."""

    data: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray | None
    n: int
    k: int


def check_quantization(q: Quantization | None, target: str, dtype: str) -> None:
    """UsageError where a quantized export cannot be made: MatMulNBits is an ONNX Runtime
    contrib kernel (planned targets only) taking float32 or float16 activations, a block of
    16 to 256 (a power of 2)."""
    from .errors import UsageError
    from .targets import get

    if q is None:
        return
    if q.bits not in (4, 8):
        raise UsageError(f"--quantize takes int4 or int8, found int{q.bits}")
    if q.block not in BLOCKS:
        raise UsageError(f"--quant-block must be one of {', '.join(map(str, BLOCKS))} (what "
                         f"MatMulNBits takes), found {q.block}")
    if not 0 <= q.accuracy <= 4:
        raise UsageError(f"--quant-accuracy is MatMulNBits' accuracy_level, 0 to 4, found "
                         f"{q.accuracy}")
    if not get(target).planned:
        raise UsageError(f"--quantize writes com.microsoft.MatMulNBits, an ONNX Runtime "
                         f"kernel: the {target} target uses standard ops only (use ort-cpu or "
                         "ort-cuda)")
    if dtype not in ("float32", "float16"):
        raise UsageError(f"--quantize: MatMulNBits takes float32 or float16 activations, not "
                         f"{dtype}")


def quantize(w: np.ndarray, q: Quantization) -> Quantized:
    """W [N, K] (out, in) in blocks of q.block along K (padded with zeros to a whole block),
    by onnxruntime.quantization's MatMulNBits quantizer."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        DefaultWeightOnlyQuantizer,
    )

    config = DefaultWeightOnlyQuantConfig(block_size=q.block, is_symmetric=q.symmetric,
                                          bits=q.bits, accuracy_level=q.accuracy)
    n, k = w.shape
    data, scales, zero = DefaultWeightOnlyQuantizer(config).qbits_block_quant(
        np.ascontiguousarray(w.T, dtype=np.float32))
    return Quantized(data, scales.astype(np.float32), None if q.symmetric else zero, n, k)


def block_shapes(n: int, k: int, q: Quantization
                 ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None]:
    """The shapes of what `quantize` gives a weight [n, k] (data, scales, zero points or None
    when symmetric), known before quantizing it (an export writes the blocks as it makes
    them)."""
    blocks = -(-k // q.block)
    zero = None if q.symmetric else (n, -(-blocks * q.bits // 8))
    return (n, blocks, q.block * q.bits // 8), (n, blocks), zero


def dequantize(w: Quantized, q: Quantization) -> np.ndarray:
    """The weight [N, K] MatMulNBits computes with: in output n, input k of block b =
    k // block, W'[n, k] = (c[n, k] - z[n, b]) * s[n, b], c the stored code (int4: two codes
    a byte, the lower 4 bits first), s the block's scale and z its zero point (int4: two a
    byte, the lower 4 bits first; 2^(bits - 1) when symmetric)."""
    n, blocks = w.scales.shape
    if q.bits == 4:
        codes = np.stack([w.data & 0x0F, w.data >> 4], axis=-1).reshape(n, blocks, -1)
    else:
        codes = w.data.reshape(n, blocks, -1)
    if w.zero_points is None:
        zero = np.full((n, blocks), 2 ** (q.bits - 1), dtype=np.float64)
    elif q.bits == 4:
        zero = np.stack([w.zero_points & 0x0F, w.zero_points >> 4], axis=-1).reshape(n, -1)
        zero = zero[:, :blocks].astype(np.float64)
    else:
        zero = w.zero_points[:, :blocks].astype(np.float64)
    values = (codes.astype(np.float64) - zero[..., None]) * w.scales.astype(np.float64)[..., None]
    return values.reshape(n, -1)[:, :w.k].astype(np.float32)


def quantized_weights(graph, q: Quantization) -> tuple[str, ...]:
    """The weights a quantized export stores in blocks: those read by linear nodes alone
    (q, k, v, o projections, MLPs, the LM head) as MatMulNBits, and the token embedding
    (its width a multiple of the block) as GatherBlockQuantized, a tied LM head reading it
    too; the weights a feed-forward form stores in blocks (`mechanisms.FFNS`, `blocked`: a
    mixture's experts, both their widths multiples of the block, in ONNX Runtime's kernel's
    blocks where the mixture runs as that kernel, else stored as the float values their
    blocks give); not a weight another op reads (latent attention's kv_b_proj when decoding
    absorbs it)."""
    from .ir import Op, all_nodes
    from .mechanisms import FFNS

    shapes = {w.name: w.shape for w in graph.weights}
    quantized, other = set(), set()
    for node in all_nodes(graph.nodes):
        for form in FFNS.values():
            quantized |= form.blocked(node, shapes, q.block)
        for key, value in node.attrs:
            if not isinstance(value, str) or value not in shapes:
                continue
            if key == "weight" and (node.op is Op.LINEAR or (node.op is Op.EMBED
                                    and shapes[value][1] % q.block == 0)):
                quantized.add(value)
            else:
                other.add(value)
    return tuple(sorted(quantized - other))


def dequantized(weights: Mapping[str, np.ndarray], names, q: Quantization) -> dict:
    """`weights` with each of `names` replaced by what its quantized form computes with (the
    oracle of a quantized model, `verify --quantize`)."""
    out = dict(weights)
    for name in names:
        w = np.asarray(weights[name], dtype=np.float32)
        out[name] = dequantize(quantize(w, q), q)
    return out
