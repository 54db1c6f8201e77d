"""Multi-head latent attention's key, `latent = mla(kv_rank, rope_dim, q_rank = none, eps =
1e-6)` (DeepSeek-V2/V3): its values, and the attention keys it cannot combine with."""

from __future__ import annotations

from collections.abc import Callable

from .. import ast
from ..mechanisms import MECHANISMS
from ..source import Span
from ..spec import Latent, Rope, Softmax
from .mechanisms import Mechanisms
from .values import FLOAT32_TINY, Param

__all__ = ["Latents"]

_MLA = (Param("kv_rank", True), Param("rope_dim", True), Param("q_rank"), Param("eps"))
# keys whose projections or per-head arithmetic latent attention replaces
_EXCLUSIVE = tuple(key for key, m in MECHANISMS.items() if not m.with_latent)


class Latents(Mechanisms):
    def latent_value(self, e: ast.Expr) -> Latent | None:
        """`none` or `mla(kv_rank = r, rope_dim = n, q_rank = none | m, eps = 1e-6)`."""
        if isinstance(e, ast.Name) and e.id == "none":
            return None
        self.callee(e, {"mla": None}, "latent")
        args = self.bind(e, "mla", _MLA)
        q_rank = None
        if "q_rank" in args and not (isinstance(args["q_rank"], ast.Name)
                                     and args["q_rank"].id == "none"):
            q_rank = self.positive(args["q_rank"], "q_rank")
        rope_dim = self.positive(args["rope_dim"], "rope_dim")
        if rope_dim % 2:
            raise self.error(f"rope_dim must be even (RoPE rotates pairs), found {rope_dim}",
                             args["rope_dim"].span, hint="DeepSeek-V3: rope_dim = 64")
        eps = self.number(args["eps"]) if "eps" in args else 1e-6
        if not FLOAT32_TINY <= eps <= 1.0:
            raise self.error(f"the latent norms' eps must be in [{FLOAT32_TINY:.3g}, 1], found "
                             f"{eps:g}", args["eps"].span)
        return Latent(self.positive(args["kv_rank"], "kv_rank"), rope_dim, q_rank, eps)

    def check_latent(self, e: dict, latent: Latent, kind: str, kernel: object, heads: int,
                     kv_heads: int | None, head_dim: int, position: object,
                     at: Callable[[str], Span]) -> bool:
        """Where latent attention cannot apply; True if any error was reported."""
        where = at("latent")
        problems = []
        if kind != "self":
            problems.append(("latent attention projects keys and values from the tokens "
                             "themselves: it is self attention", at("kind"),
                             "remove `kind = cross`"))
        if not isinstance(kernel, Softmax):
            problems.append(("latent attention is a softmax attention", at("kernel"),
                             "use `kernel = softmax`"))
        if kv_heads not in (None, heads):
            problems.append((f"every head has its own keys and values from the latent: "
                             f"kv_heads must be heads ({heads})", at("kv_heads"),
                             "remove `kv_heads`"))
        if head_dim <= latent.rope_dim:
            problems.append((f"head_dim ({head_dim}) is the latent part's width plus "
                             f"rope_dim ({latent.rope_dim}): it must be larger", where,
                             "DeepSeek-V3: head_dim = 192 (128 + 64)"))
        if isinstance(position, Rope) and position.dim != latent.rope_dim:
            problems.append(("RoPE rotates the last rope_dim features of each head and the "
                             "shared key: `dim` is rope_dim", at("position"),
                             "remove `dim` from rope(...)"))
        elif position is not None and not isinstance(position, Rope):
            problems.append(("latent attention's positions are RoPE on its rope_dim features",
                             at("position"), "use `position = rope(...)` or none"))
        for key in _EXCLUSIVE:
            if key in e and not (isinstance(e[key].value, ast.Name)
                                 and e[key].value.id in ("none", "false")):
                problems.append((f"`{key}` and latent attention do not combine", at(key),
                                 f"remove `{key}`"))
        for message, span, hint in problems:
            self.error(message, span, hint=hint)
        return bool(problems)
