"""Nodes that load, have a kernel, and are rejected when they run: ONNX Runtime's kernels
check some inputs and attributes only at run time. Each rule names the provider(s), what it
rejects and its source; `check` applies them beside the kernel tables."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .bindings import Node

__all__ = ["GQA_HEAD_SIZE_MULTIPLE", "RULES", "Rule"]

GQA_HEAD_SIZE_MULTIPLE = 8


@dataclass(frozen=True)
class Rule:
    providers: tuple[str, ...]
    op: str  # "com.microsoft.GroupQueryAttention"
    why: str
    source: str
    rejects: Callable[[Node], bool]


def _input(node: Node, i: int) -> str:
    ins = node.proto.input
    return ins[i] if i < len(ins) else ""


def _attr(node: Node, name: str, default: int = 0) -> int:
    for a in node.proto.attribute:
        if a.name == name:
            return a.i
    return default


def _gqa_head_size(node: Node) -> int | None:
    """GroupQueryAttention's head size from its query's last dim: num_heads heads, or, with
    the key and value packed into the query (no key input), num_heads + 2 kv_num_heads."""
    dims = node.shapes.get(_input(node, 0))
    if not dims or dims[-1] is None:
        return None
    heads = _attr(node, "num_heads")
    if not _input(node, 1):
        heads += 2 * _attr(node, "kv_num_heads")
    return dims[-1] // heads if heads else None


def _odd_head(node: Node) -> bool:
    size = _gqa_head_size(node)
    return size is not None and size % GQA_HEAD_SIZE_MULTIPLE != 0


RULES = (
    Rule(("cpu", "cuda"), "com.microsoft.GroupQueryAttention",
         f"its head size is not a multiple of {GQA_HEAD_SIZE_MULTIPLE} (\"head_size must be a "
         f"multiple of {GQA_HEAD_SIZE_MULTIPLE}\")",
         "onnxruntime 1.31 contrib_ops/cpu/bert/group_query_attention_helper.h, shared by both "
         "kernels; measured on the CPU provider", _odd_head),
    Rule(("cpu",), "com.microsoft.GroupQueryAttention",
         "it takes q_norm_weight or k_norm_weight, which the CPU kernel refuses (\"q_norm_weight "
         "/ k_norm_weight inputs are not supported\"; the CUDA kernel runs them)",
         "onnxruntime 1.31 contrib_ops/cpu/bert/group_query_attention.cc; measured on the CPU "
         "provider", lambda n: bool(_input(n, 14) or _input(n, 15))),
)
