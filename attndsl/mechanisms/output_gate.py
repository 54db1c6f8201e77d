"""The output gate (`output_gate = sigmoid`; Qwen3-Next's gated attention): the query
projection gives each head value_dim more rows, its gate logits (each head's head_dim query
rows, then its value_dim gate rows), and each head's output is multiplied by sigmoid of its
gate logits before the output projection."""

from __future__ import annotations

from typing import Any, ClassVar

from ..ir.graph import Op
from ..shapes import T
from .base import Mechanism, Site

__all__ = ["MECHANISM"]


class _OutputGate(Mechanism):
    key = "output_gate"
    hook = "merged"
    forms: ClassVar = {"sigmoid": ()}
    with_delta = "its output has its own gate (`z_proj`)"

    def read(self, c: Any, e: Any) -> str | None:
        name, _ = c.call(e, self.forms, self.key)
        return name

    def query_rows(self, spec: Any, value: str) -> int:
        return spec.value_dim

    def projected(self, site: Site, value: str, q: str) -> str:
        s, b, p = site.spec, site.b, site.p
        part = b.emit(Op.HEAD_SLICE, f"{p}q_part", (q,), T("B", "L", s.heads * s.head_dim),
                      heads=s.heads, start=0, stop=s.head_dim)
        b.emit(Op.HEAD_SLICE, f"{p}gate_logits", (q,), T("B", "L", s.heads * s.value_dim),
               heads=s.heads, start=s.head_dim, stop=s.head_dim + s.value_dim)
        return part

    def expand(self, site: Site, value: str, x: str, part: str) -> str:
        s, b, p = site.spec, site.b, site.p
        shape = T("B", "L", s.heads * s.value_dim)
        g = b.emit(Op.ACTIVATION, f"{p}gate", (f"{p}gate_logits",), shape, kind="sigmoid")
        return b.emit(Op.MUL, f"{p}gated", (x, g), shape)


MECHANISM = _OutputGate()
