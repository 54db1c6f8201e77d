"""The output gate (`output_gate = sigmoid`; Qwen3-Next's gated attention): the query
projection gives each head more rows, its gate logits (each head's head_dim query rows, then its
gate rows), and each head's output is multiplied by the gate function of its gate logits before
the output projection. Elementwise (value_dim gate rows per head) or `per_head = true` (one gate
row per head, LFM3's and Laguna's: the head's whole output times one number); `sigmoid` or
`softplus` (Laguna's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..ir.graph import Op
from ..shapes import T
from .base import Mechanism, Site

__all__ = ["MECHANISM", "OutputGate"]


@dataclass(frozen=True)
class OutputGate:
    """The spec's value: the gate function and whether it gives one number per head."""

    function: str = "sigmoid"
    per_head: bool = False


class _OutputGate(Mechanism):
    key = "output_gate"
    hook = "merged"
    forms: ClassVar = {"sigmoid": (("per_head", False),), "softplus": (("per_head", False),)}
    with_recurrent = "its output has its own gate (`z_proj`)"
    with_projection = True  # the query projection (q_proj, or q_b_proj) gives the gate rows

    def read(self, c: Any, e: Any) -> OutputGate | None:
        name, args = c.call(e, self.forms, self.key)
        if name is None:
            return None
        per_head = "per_head" in args and c.boolean(args["per_head"], "per_head")
        return OutputGate(name, per_head)

    def query_rows(self, spec: Any, value: OutputGate) -> int:
        return 1 if value.per_head else spec.value_dim

    def projected(self, site: Site, value: OutputGate, q: str) -> str:
        s, b, p = site.spec, site.b, site.p
        rows = self.query_rows(s, value)
        part = b.emit(Op.HEAD_SLICE, f"{p}q_part", (q,), T("B", "L", s.heads * s.head_dim),
                      heads=s.heads, start=0, stop=s.head_dim)
        b.emit(Op.HEAD_SLICE, f"{p}gate_logits", (q,), T("B", "L", s.heads * rows),
               heads=s.heads, start=s.head_dim, stop=s.head_dim + rows)
        return part

    def expand(self, site: Site, value: OutputGate, x: str, part: str) -> str:
        s, b, p = site.spec, site.b, site.p
        shape = T("B", "L", s.heads * s.value_dim)
        if not value.per_head:
            g = b.emit(Op.ACTIVATION, f"{p}gate", (f"{p}gate_logits",), shape,
                       kind=value.function)
            return b.emit(Op.MUL, f"{p}gated", (x, g), shape)
        g = b.emit(Op.ACTIVATION, f"{p}gate", (f"{p}gate_logits",), T("B", "L", s.heads),
                   kind=value.function)  # one number per head, broadcast over its values
        g = b.emit(Op.SPLIT_HEADS, f"{p}gate_heads", (g,), T("B", s.heads, "L", 1),
                   heads=s.heads, dim=1)
        heads = b.emit(Op.SPLIT_HEADS, f"{p}gated_heads", (x,),
                       T("B", s.heads, "L", s.value_dim), heads=s.heads, dim=s.value_dim)
        gated = b.emit(Op.MUL, f"{p}gated_each", (heads, g), T("B", s.heads, "L", s.value_dim))
        return b.emit(Op.MERGE_HEADS, f"{p}gated", (gated,), shape)


MECHANISM = _OutputGate()
