"""The attention mechanisms of 2024-2026 models beside the kernel: learned sinks and
differential attention (and the output gate, which needs no checking of its own): their
values and where they cannot apply. The mechanisms that are modules of their own
(`attndsl/mechanisms/`) are read and checked here through their module."""

from __future__ import annotations

from collections.abc import Callable

from .. import ast, mechanisms
from ..source import Span
from ..spec import Differential, Softmax
from .delta import DeltaRules
from .values import FLOAT32_MAX, FLOAT32_TINY, Param

__all__ = ["Mechanisms"]

_DIFFERENTIAL = {"lambda": (Param("init"), Param("eps"))}


class Mechanisms(DeltaRules):
    def call(self, e: ast.Expr, forms: dict[str, tuple[tuple[str, bool], ...]],
             what: str) -> tuple[str | None, dict[str, ast.Expr]]:
        """A mechanism's value: (None, {}) for `none`, else its call's name and arguments by
        parameter (a module's `forms`: name -> ((parameter, required), ...))."""
        if isinstance(e, ast.Name) and e.id == "none":
            return None, {}
        name, _ = self.callee(e, forms, what)
        return name, self.bind(e, name, tuple(Param(n, r) for n, r in forms[name]))

    def mechanism_values(self, get: Callable) -> tuple[tuple[str, object], ...]:
        """(key, value) of every mechanism module the attention sets, in their order."""
        values = ((key, get(key, lambda x, m=m: m.read(self, x), None))
                  for key, m in mechanisms.MECHANISMS.items())
        return tuple((key, value) for key, value in values if value is not None)

    def differential_value(self, e: ast.Expr) -> Differential | None:
        """`none` or `lambda(init = depth | number, eps = 1e-5)`."""
        if isinstance(e, ast.Name) and e.id == "none":
            return None
        name, _ = self.callee(e, _DIFFERENTIAL, "differential")
        args = self.bind(e, name, _DIFFERENTIAL[name])
        init = None
        if "init" in args and not (isinstance(args["init"], ast.Name)
                                   and args["init"].id == "depth"):
            init = self.number(args["init"])
            if not -FLOAT32_MAX <= init <= FLOAT32_MAX:
                raise self.error(f"lambda init must be a number float32 can hold, found "
                                 f"{init:g}", args["init"].span,
                                 hint="`depth` is the paper's 0.8 - 0.6 exp(-0.3 l)")
        eps = self.number(args["eps"]) if "eps" in args else 1e-5
        if not FLOAT32_TINY <= eps <= 1.0:
            raise self.error(f"the per-head norm's eps must be in [{FLOAT32_TINY:.3g}, 1], "
                             f"found {eps:g}", args["eps"].span)
        return Differential(init, eps)

    def check_mechanisms(self, e: dict, kernel: object, heads: int, kv_heads: int | None,
                         at: Callable[[str], Span], values: tuple = ()) -> bool:
        """Where sinks, differential attention and the mechanism modules' `values` cannot
        apply; True if any error was reported."""
        failed = any([mechanisms.MECHANISMS[key].conflicts(self, value, e, kernel, at)
                      for key, value in values])
        named = type(kernel).__name__.removesuffix("Kernel").lower()
        if _set(e, "sinks", "learned") and not isinstance(kernel, Softmax):
            self.error("`sinks = learned` adds a logit per head to a softmax's denominator: "
                       f"the {named} kernel has none", at("sinks"),
                       hint="use `kernel = softmax`, or remove `sinks`")
            failed = True
        if "differential" not in e or _set(e, "differential", "none"):
            return failed
        if not isinstance(kernel, Softmax):
            self.error(f"differential attention subtracts two softmax maps: the {named} "
                       "kernel has none", at("differential"),
                       hint="use `kernel = softmax`, or remove `differential`")
            failed = True
        if heads % 2 or (kv_heads or heads) % 2:
            self.error(f"differential attention pairs query head i with i + heads / 2 and kv "
                       f"head j with j + kv_heads / 2: heads ({heads}) and kv_heads "
                       f"({kv_heads or heads}) must be even", at("differential"),
                       hint="DiffLlama uses an even number of kv heads")
            failed = True
        if _set(e, "output_gate", "sigmoid"):
            self.error("an output gate per head and differential attention's pairs of heads "
                       "do not combine", at("output_gate"),
                       hint="remove `output_gate` or `differential`")
            failed = True
        return failed


def _set(e: dict, key: str, word: str) -> bool:
    """Whether entry `key` is the word `word`."""
    return key in e and isinstance(e[key].value, ast.Name) and e[key].value.id == word
