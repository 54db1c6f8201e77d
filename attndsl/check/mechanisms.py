"""The mechanism modules (`attndsl/mechanisms/`), read and checked here through their module:
their call values, and where each cannot apply."""

from __future__ import annotations

from collections.abc import Callable

from .. import ast, mechanisms
from ..source import Span
from .kernels import Kernels
from .values import Param

__all__ = ["Mechanisms"]


class Mechanisms(Kernels):
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

    def check_mechanisms(self, e: dict, kernel: object, heads: int, kv_heads: int | None,
                         at: Callable[[str], Span], values: tuple = ()) -> bool:
        """Where the mechanism modules' `values` cannot apply; True if any error
        was reported."""
        where = mechanisms.Where(e, kernel, heads, kv_heads or heads, at)
        problems = [mechanisms.MECHANISMS[key].conflicts(self, value, where)
                    for key, value in values]
        return any(problems)

