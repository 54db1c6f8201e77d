"""Values equal to keys (`values = keys`; Gemma 4's `attention_k_eq_v`): no value projection,
the value heads are the key projection's rows as projected, before the keys' norm and RoPE
(v_h = (x W_k^T)_h; a `v_norm` then norms them). The attention's value_dim is its head_dim;
no `v` bias. `ir/attention.py` reads the value (`Attention.mechanism("values")`) where it
projects, and the weight table leaves out `v_proj`."""

from __future__ import annotations

from typing import Any

from .base import Mechanism, Where

__all__ = ["MECHANISM"]


class _ValuesKeys(Mechanism):
    key = "values"
    hook = "projected"
    words = ("keys",)
    with_recurrent = "its values are its own projections'"

    def read(self, c: Any, e: Any) -> str | None:
        return "keys" if c.word(e, ("none", "keys"), self.key) == "keys" else None

    def conflicts(self, c: Any, value: str, where: Where) -> bool:
        e = where.entries
        if "value_dim" in e:
            c.error("`values = keys` makes the values the keys' rows: value_dim is head_dim",
                    where.at("value_dim"), hint="remove `value_dim`")
            return True
        bias = e.get("bias")
        if bias is not None and any(getattr(i, "id", None) == "v"
                                    for i in getattr(bias.value, "items", ())):
            c.error("`values = keys` has no value projection, so no `v` bias", where.at("bias"),
                    hint="remove `v` from the bias list")
            return True
        return False

    def expand(self, site: Any, value: str, x: str, part: str) -> str:
        return x  # (ir/attention.py projects the keys once and reads them as values too)


MECHANISM = _ValuesKeys()
