"""The execution strategies, one module each (docs/ARCHITECTURE.md, An execution strategy):
every module of this package that defines `STRATEGY` is one, found here by name. `LADDER` is
the planner's order; `DEFAULT` the form that always applies; `LOWERINGS` the fused strategies'
lowerings by name, and a kernel's own node's by the kernel's name (a non-fusing strategy that
lowers it), which callers pass to `backends.lower.build_model` (the lowering, a layer below,
never imports this package)."""

from __future__ import annotations

import importlib
import pkgutil

from .base import Context, Match, Reject, Strategy

__all__ = ["BY_NAME", "DEFAULT", "LADDER", "LOWERINGS", "Context", "Match", "Reject", "Strategy"]


def _discover() -> dict[str, Strategy]:
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        strategy = getattr(module, "STRATEGY", None)
        if isinstance(strategy, Strategy):
            found[strategy.name] = strategy
    return found


BY_NAME: dict[str, Strategy] = _discover()
LADDER: tuple[Strategy, ...] = tuple(sorted(
    (s for s in BY_NAME.values() if s.priority is not None), key=lambda s: s.priority))
DEFAULT = BY_NAME["dense"]
# a non-fusing strategy's lowering is its kernel's (named as the kernel: its `kernel` node)
LOWERINGS = {name: s.lower for name, s in BY_NAME.items() if s.fuses or s.lower is not None}
