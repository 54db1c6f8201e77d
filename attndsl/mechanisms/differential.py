"""Differential attention (`differential = lambda(init = depth | x, eps = 1e-5)`; DiffLlama, the
Differential Transformer): query heads i and i + H/2 make two softmax maps over the same pair
of kv heads' values, subtracted with a learned lambda; the difference is RMS-normed per head
and scaled by 1 - lambda_init."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..ir.graph import Op
from ..shapes import T
from ..spec import Softmax
from ..weight_table import Weight
from .base import Mechanism, Site, Where

__all__ = ["LAMBDAS", "MECHANISM", "Differential"]

# lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init
LAMBDAS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")


@dataclass(frozen=True)
class Differential:
    """The spec's value: `init` is lambda_init, or None for 0.8 - 0.6 exp(-0.3 l) at the
    layer's index l; `eps` the per-head RMSNorm's."""

    init: float | None
    eps: float

    def lambda_init(self, layer: int) -> float:
        return 0.8 - 0.6 * math.exp(-0.3 * layer) if self.init is None else self.init


class _Differential(Mechanism):
    key = "differential"
    hook = "merged"
    forms: ClassVar = {"lambda": (("init", False), ("eps", False))}
    with_recurrent = None  # refused by its own rule: a recurrent kernel has no softmax maps
    attributes = ("heads", "lambda_init", "eps", "weights")

    def read(self, c: Any, e: Any) -> Differential | None:
        from ..check.values import FLOAT32_MAX

        name, args = c.call(e, self.forms, self.key)
        if name is None:
            return None
        init = None
        if "init" in args and getattr(args["init"], "id", None) != "depth":
            init = c.number(args["init"])
            if not -FLOAT32_MAX <= init <= FLOAT32_MAX:
                raise c.error(f"lambda init must be a number float32 can hold, found "
                              f"{init:g}", args["init"].span,
                              hint="`depth` is the paper's 0.8 - 0.6 exp(-0.3 l)")
        eps = c.eps(args, 1e-5, "the per-head norm's")
        return Differential(init, eps)

    def conflicts(self, c: Any, value: Differential, where: Where) -> bool:
        failed, at = False, where.at
        heads = (where.heads, where.kv_heads)
        if not isinstance(where.kernel, Softmax):
            named = getattr(type(where.kernel), "name", type(where.kernel).__name__.lower())
            c.error(f"differential attention subtracts two softmax maps: the {named} kernel "
                    "has none", at(self.key), hint="use `kernel = softmax`, or remove "
                                                   "`differential`")
            failed = True
        if heads[0] % 2 or heads[1] % 2:
            c.error(f"differential attention pairs query head i with i + heads / 2 and kv head "
                    f"j with j + kv_heads / 2: heads ({heads[0]}) and kv_heads ({heads[1]}) "
                    "must be even", at(self.key), hint="DiffLlama uses an even number of kv "
                                                       "heads")
            failed = True
        gate = where.entries.get("output_gate")
        if gate is not None and getattr(gate.value, "id", None) == "sigmoid":
            c.error("an output gate per head and differential attention's pairs of heads do "
                    "not combine", at("output_gate"), hint="remove `output_gate` or "
                                                           "`differential`")
            failed = True
        return failed

    def weights(self, value: Differential, spec: Any, prefix: str) -> list[Weight]:
        return [Weight(f"{prefix}{name}", (spec.head_dim,), "lambda") for name in LAMBDAS]

    def core(self, spec: Any, value: Differential) -> Any:
        """The core weighs each kv head's values beside its partner's: twice the values."""
        wide = 2 * spec.value_dim
        return replace(spec, value_dim=wide, variants=tuple(
            replace(x, attention=replace(x.attention, value_dim=wide)) for x in spec.variants))

    def values(self, site: Site, value: Differential, v: str) -> str:
        s = site.spec
        return site.b.emit(Op.VALUE_PAIRS, f"{site.p}v_pairs", (v,),
                           T("B", s.kv_heads, site.n, 2 * s.value_dim))

    def expand(self, site: Site, value: Differential, x: str, part: str) -> str:
        s = site.spec
        return site.b.emit(Op.APPLY, f"{site.p}differential", (x,),
                           T("B", "L", s.heads * s.value_dim), mechanism=self.key,
                           heads=s.heads, lambda_init=value.lambda_init(site.layer),
                           eps=value.eps, weights=tuple(f"{site.prefix}{w}" for w in LAMBDAS))

    def apply(self, xp: Any, o: Any, pos: Any, *, heads: int, lambda_init: float, eps: float,
              weights: list[Any]) -> Any:
        """Merged heads (B, L, H * 2 dv) -> (B, L, H * dv): head i < H/2 is
        (1 - lambda_init) * rmsnorm(o_i - lambda o_{i + H/2}), lambda = exp(q1 . k1) -
        exp(q2 . k2) + lambda_init in float32, narrowed to the model dtype (as DiffLlama)."""
        q1, k1, q2, k2 = (xp.astype(w, "float32") for w in weights)
        lam = xp.exp(xp.sum(q1 * k1, axis=-1)) - xp.exp(xp.sum(q2 * k2, axis=-1)) + lambda_init
        dims = [xp.shape(o, 0), xp.shape(o, 1)]
        x = xp.reshape(o, [*dims, heads, -1])  # (B, L, H, 2 dv)
        d = xp.slice(x, 2, 0, heads // 2) - xp.slice(x, 2, heads // 2, heads) * xp.astype(
            lam, xp.dtype(o))
        h = xp.astype(d, "float32")
        h = h / xp.sqrt(xp.mean(h * h, axis=-1, keepdims=True) + eps)
        return xp.reshape(xp.astype(h * (1.0 - lambda_init), xp.dtype(o)), [*dims, -1])


MECHANISM = _Differential()
