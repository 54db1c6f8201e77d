"""Learned attention sinks (`sinks = learned`, gpt-oss): one learned logit per head joins the
softmax's denominator, p_j = exp(s_j - m) / (sum_k exp(s_k - m) + exp(sink_h - m)) with m the
row's maximum over its visible scores and the sink, so a head may attend to nothing. Its
tensor `sinks` [heads]; the core's masked softmax reads it (the `softmax` op's `sinks`) as
its extra logit per head (`mechanisms.softmax_logits`, `formulas.masked_softmax`)."""

from __future__ import annotations

from typing import Any

from ..spec import Softmax
from ..weight_table import Weight
from .base import Mechanism, Site, Where

__all__ = ["MECHANISM"]


class _Sinks(Mechanism):
    key = "sinks"
    hook = "softmax"
    words = ("learned",)
    with_projection = True
    with_recurrent = None  # refused by `conflicts`, as every kernel without a softmax
    softmax_attr = "sinks"
    described = "learned sink logits"

    def read(self, c: Any, e: Any) -> bool | None:
        return c.word(e, ("none", "learned"), self.key) == "learned" or None

    def conflicts(self, c: Any, value: bool, where: Where) -> bool:
        if isinstance(where.kernel, Softmax):
            return False
        named = getattr(type(where.kernel), "name", type(where.kernel).__name__.lower())
        c.error("`sinks = learned` adds a logit per head to a softmax's denominator: "
                f"the {named} kernel has none", where.at(self.key),
                hint="use `kernel = softmax`, or remove `sinks`")
        return True

    def weights(self, value: bool, spec: Any, prefix: str) -> list[Weight]:
        return [Weight(f"{prefix}sinks", (spec.heads,), "normal")]  # N(0, 1) logits

    def softmax(self, site: Site, value: bool) -> str:
        return f"{site.prefix}sinks"


MECHANISM = _Sinks()
