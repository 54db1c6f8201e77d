"""What a core selector is: one module that carries every facet of an attention key whose value
chooses, at run time, which of several attention cores runs (`key = [...]`, by query length or
another run-time quantity), every core sharing the layer's projections: its value and checks,
its IR (one generic `switch` node whose branches hold each core's nodes), the lengths verify
checks, what show names, and why decoding and a torch.export program refuse it.

Not a `Mechanism` (one value at one hook point of one core) nor a `Kernel` (one core's
arithmetic): a selector holds whole cores, each checked as an attention of its own, and builds
none of them itself (the IR passes it a callback that builds one core). The spec holds its
value in `Attention.variants`: a tuple of variants, each with the `attention` it runs
(`Attention.cores` and `runtime_inputs` read only that). Op.SWITCH and its lowerings (torch's
torch.cond, ONNX's nested If) are generic: an If over branches is not one selector's alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Selector"]


class Selector:
    """One core selector: a module `attndsl/mechanisms/<name>.py` defines `SELECTOR`, an
    instance of a subclass, found by its presence (`mechanisms.SELECTORS`, by `key`;
    `selector_of`, by its variants' class's `selector`)."""

    key: str  # the attention key that sets it (`key = [...]`)
    # with a recurrent kernel (`base_recurrent`), why it does not apply there
    with_recurrent: str = "the kernel has one form"
    # why a decoding step cannot choose (after "`{name}` "), and the hint
    undecodable: tuple[str, str]
    # why a torch.export program cannot hold it yet (after "`{name}` "), and the hint
    unexportable: tuple[str, str]

    def read(self, c: Any, d: Any, e: Any) -> tuple:
        """The variants of `key = e` in the attention definition `d` (each checked as an
        attention of its own through `c.attention`), or None where one failed; or raise the
        checker's located diagnostic (`c` is the checker)."""
        raise NotImplementedError

    def switch(self, b: Any, spec: Any, p: str, q: str, k: str, v: str, out: Any,
               build: Callable[[Any, Any, str], str]) -> str:
        """The switch node over q, k and v (its output of type `out`, named `{p}merged`): one
        branch per variant, each the nodes `build(builder, attention, prefix)` emits."""
        raise NotImplementedError

    def lengths(self, spec: Any) -> dict[int, str]:
        """The lengths verify checks for the choice, each with why."""
        return {}

    def serving(self, spec: Any, L: int) -> Any:
        """The attention that runs at query length L."""
        raise NotImplementedError

    def longest(self, spec: Any, L: int) -> int | None:
        """The longest length the core serving L serves (None: every longer one)."""
        return None

    def label(self, spec: Any, L: int) -> str:
        """What show appends to name the core serving L (' (...)')."""
        return ""
