"""The gated delta rule's checks (`kernel = delta_rule(...)`, Qwen3-Next's linear layers): its
key heads, and the attention keys it cannot combine with (it has its own projections, norms
and gate, no scores and no positions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .. import ast
from .. import masks as m
from ..mechanisms import MECHANISMS, SCORED
from ..source import Span
from ..spec import DeltaRule
from .kernels import Kernels, arg_span

__all__ = ["DeltaRules"]

# keys whose meaning is a softmax's, a position scheme's, or another projection form's
_NOT_WITH = {**{key: m.with_delta for key, m in SCORED.items()},
             "sparsity": "it forms no scores",
             "latent": "it has its own projections", "by_length": "it has one form",
             **{key: m.with_delta for key, m in MECHANISMS.items() if m.with_delta}}


class DeltaRules(Kernels):
    def check_delta(self, e: dict[str, ast.Entry], kernel: DeltaRule, heads: int,
                    kv_heads: int | None, kind: str, mask: m.Mask | None, position: object,
                    dropout: float | None,
                    at: Callable[[str], Span]) -> tuple[bool, DeltaRule]:
        """(True if any error was reported, the kernel with its key heads resolved)."""
        failed = False
        key_heads = kernel.key_heads or heads
        if heads % key_heads:
            self.error(f"each of the {key_heads} key heads serves heads / key_heads value "
                       f"heads: heads ({heads}) must be a multiple of it",
                       arg_span(e["kernel"].value, "key_heads") or at("kernel"),
                       hint="Qwen3-Next: heads = 32, key_heads = 16")
            failed = True
        problems = []
        if kind != "self":
            problems.append(("the delta rule reads its own sequence's keys, in order: it is "
                             "self attention", at("kind"), "remove `kind = cross`"))
        if mask is not None and not _causal_padding(mask):
            problems.append((f"the delta rule is causal by construction: its mask is `causal`, "
                             f"or `causal & padding` (padding slots skipped), found "
                             f"`{m.render(mask)}`", at("mask"),
                             "use `mask = causal` or `causal & padding(side = left)`"))
        if position is not None:
            problems.append(("the delta rule has no positions: its order is the recurrence's",
                             at("position"), "remove `position`"))
        if kv_heads not in (None, heads):
            problems.append(("the delta rule's value heads are its heads; its query and key "
                             "heads are the kernel's `key_heads`", at("kv_heads"),
                             "remove `kv_heads`; write delta_rule(key_heads = n)"))
        if dropout:
            problems.append(("attention dropout needs attention weights; the delta rule has "
                             "none", e["dropout"].key_span, "remove `dropout`"))
        for key, why in _NOT_WITH.items():
            if key in e and not (isinstance(e[key].value, ast.Name)
                                 and e[key].value.id in ("none", "auto", "false")):
                problems.append((f"`{key}` does not apply to the delta rule: {why}",
                                 e[key].key_span, f"remove `{key}`"))
        for message, span, hint in problems:
            self.error(message, span, hint=hint)
        return failed or bool(problems), replace(kernel, key_heads=key_heads)


def _causal_padding(mask: m.Mask) -> bool:
    """`causal`, or `causal & padding` (either side, either order)."""
    match mask:
        case m.Causal("top_left"):
            return True
        case m.And(m.Causal("top_left"), m.Padding()) | m.And(m.Padding(), m.Causal("top_left")):
            return True
    return False
