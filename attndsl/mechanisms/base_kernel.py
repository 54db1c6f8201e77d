"""What a kernel is (`kernel = name(...)`): a module of `attndsl/mechanisms/` defining `KERNEL`,
an instance of `Kernel`, with what its `conflicts` may read (`KernelWhere`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base import Site

__all__ = ["Kernel", "KernelWhere"]


@dataclass(frozen=True)
class KernelWhere:
    """What a kernel's `conflicts` may read of the attention being checked: its entries
    (key -> ast.Entry), kind, heads, kv heads, features per head, biased projections, mask
    (None where its own error was reported), position, dropout, and `at(key)`, where an
    entry is written."""

    entries: dict
    kind: str
    heads: int
    kv_heads: int
    head_dim: int
    bias: tuple[str, ...] | None
    mask: Any
    position: Any
    dropout: float | None
    at: Callable[[str], Any]


class Kernel:
    """One attention kernel other than the softmax (`kernel = name(...)`): a module
    `attndsl/mechanisms/<name>.py` defines `KERNEL`, an instance of a subclass, found by its
    presence. Its core is one `kernel` node (`expand`), whose arithmetic (`apply`) both
    backends run over their array namespace, or, with `softmax_core`, the softmax core over
    the rows its `rows` makes of the keys and values; what the planner, verify, bench, show
    and the decoding check must know of it are the attributes below."""

    name: str  # the call: `kernel = name(...)`
    params: tuple[tuple[str, bool], ...] = ()  # (parameter, required)
    described: str = ""  # how a diagnostic names it ("a ... kernel")
    # its keys are its queries: no k projection, and nothing that transforms q or k apart
    shares_keys: bool = False
    # why a core selector's variant cannot use it (the variants share the layer's projections)
    own_projections: str | None = None
    scores: bool = True  # whether it forms a [B, H, L, S] score per pair
    # without `scores`: whether the torch module's form still weights every (query, key)
    # pair in one [B, H, L, S] array (bench then guards its memory as a softmax core's)
    eager_pairs: bool = False
    # why a decoding step cannot run it (said after "`name` uses {described}, "), or None
    undecodable: str | None = None
    # why a decoding step cannot run it as cross attention (said after "`name` is cross
    # attention with {described}, "), or None
    cross_undecodable: str | None = None
    # its `apply` takes `index`: the int64 query and key indices ((L, 1), (1, S); a decoding
    # call's queries after its cached keys) where its node is `causal`, else None
    indexed: bool = False
    # torch.export cannot prove its shape guards against declared length ranges
    inferred_shapes: bool = False
    # the IR attributes of its `kernel` node (after `kernel`), plain values; `keys`, when
    # present, is the mask of the keys it sees (padding), which the backends evaluate
    attributes: tuple[str, ...] = ()
    # its core stays the softmax, over the keys and values its `rows` makes (planned as a
    # softmax core by its strategy; no `kernel` node, no mask node: `rows` applies the mask)
    softmax_core: bool = False
    # the ops its `rows` puts on the keys: the planner knows its core by them (ir.Op values)
    key_ops: frozenset = frozenset()
    # why at most one core selector's variant may use it (its weights are the layer's), or None
    per_layer: str | None = None
    # (what its `stack_shared` value is, the hint) where a stack's attentions differ in it
    stack_shares: tuple[str, str] = ("", "")

    def read(self, c: Any, args: dict) -> Any:
        """The spec's value from the call's arguments by parameter (`c` is the checker)."""
        raise NotImplementedError

    def conflicts(self, c: Any, value: Any, where: KernelWhere) -> bool:
        """Report what the attention sets that the kernel cannot honour; True if any."""
        return False

    def lengths(self, value: Any) -> dict[int, str]:
        """Lengths `verify` should check by default, each with why."""
        return {}

    def pairs(self, value: Any, batch: int, length: int, keys: int) -> int | None:
        """The (b, q, k) pairs it scores at this shape, `length` queries and `keys` keys
        (bench's count), or None where the mask's visible pairs are the count."""
        return None

    def describe(self, value: Any) -> str | None:
        """A line `show` adds under the mask's picture, or None."""
        return None

    def key_limit(self, value: Any) -> tuple[int, str] | None:
        """(the most keys it takes, why: said after "`name`'s "), or None: `length_limits`
        bounds the lengths of its keys' axis by it."""
        return None

    def stack_shared(self, value: Any) -> Any:
        """What every attention of a stack must share of it (its weights are the stack's,
        `stack_weights`), or None."""
        return None

    def weights(self, spec: Any, prefix: str, stacked: bool) -> list:
        """Its own tensors (weight_table.Weight) in the attention `spec` (a core: a core selector's
        variant's), named from `prefix`; `stacked`: in a transformer, whose stack holds
        those of `stack_weights`."""
        return []

    def stack_problem(self, value: Any, layers: int) -> tuple[str, str] | None:
        """(why it cannot be an attention of a stack of `layers` blocks, the hint), or None."""
        return None

    def stack_weights(self, spec: Any) -> list:
        """The tensors a transformer stack holds once for every layer's attention `spec`."""
        return []

    def rows(self, site: Site, value: Any, k: str, v: str) -> tuple[str, str, Any]:
        """With `softmax_core`: its nodes on the k and v heads before the core, and the rows
        the core reads (k, v, their count n)."""
        raise NotImplementedError

    def mask(self, node: Any) -> Any:
        """The mask its `kernel` node honours (the planner's view of the core)."""
        raise NotImplementedError

    def expand(self, site: Site, value: Any, q: str, k: str | None, v: str) -> str:
        """Its `kernel` node on the q, k (None where `shares_keys`) and v heads: the value
        heads (B, heads, L, value_dim) it makes."""
        raise NotImplementedError

    def apply(self, xp: Any, q: Any, k: Any, v: Any, kept: Any, **attrs: Any) -> Any:
        """Its arithmetic over the array namespace `xp` (torch and ONNX from this one
        text): q, k (None where `shares_keys`), v heads; `kept` (B|1, n) the keys its `keys`
        mask shows, or a decoding call's real keys (attention_mask), or None for all; `index`
        where `indexed`."""
        raise NotImplementedError

    # kernels with their own projections (`base_recurrent.Recurrent`)
    # it replaces the whole attention from x to the merged heads (`layer`), o_proj aside: its
    # `kernel` node is called with `run`, not `apply`, and its weights are `own_weights`
    own_layer: bool = False
    # a decoding call's states per layer in place of a key and a value cache
    # (past_key_values.{i}.<state> in, present.{i}.<state> out; `state_type`), or ()
    states: tuple[str, ...] = ()
    # what its layer carries when decoding, as the planner says why no cache is in place
    carries: str = ""
    # its graph holds control flow torch.onnx.export cannot write (a Scan, an If): attndsl
    # lowers it on every target, the portable one included
    lowered: bool = False

    def resolve(self, value: Any, where: KernelWhere) -> Any:
        """The value as the attention holds it, its defaults that depend on the layer filled
        in (a count of heads that defaults to the layer's)."""
        return value

    @staticmethod
    def causal_padding(mask: Any) -> bool:
        """With `own_layer`: whether `mask` is what a layer reading its tokens in order honours
        by construction: `causal`, or `causal & padding` (either side, either order)."""
        from .. import masks as m

        match mask:
            case m.Causal("top_left"):
                return True
            case (m.And(m.Causal("top_left"), m.Padding())
                  | m.And(m.Padding(), m.Causal("top_left"))):
                return True
        return False

    def ordered_problems(self, where: Any, name: str, reads: str, empty: str, order: str,
                         kv_heads: tuple) -> list[tuple]:
        """With `own_layer`: (message, span, hint) of each attention key such a layer
        (`name`, reading its own sequence's `reads` in order) refuses: cross attention, a mask
        other than `causal_padding`'s (`empty`: what its padding slots are), positions
        (`order`: what orders it instead), `kv_heads` as the given (message, hint) says, and
        dropout."""
        from .. import masks as m

        e, at, heads = where.entries, where.at, where.heads
        problems = []
        if where.kind != "self":
            problems.append((f"{name} reads its own sequence's {reads}, in order: it is self "
                             "attention", at("kind"), "remove `kind = cross`"))
        if where.mask is not None and not self.causal_padding(where.mask):
            problems.append((f"{name} is causal by construction: its mask is `causal`, or "
                             f"`causal & padding` ({empty}), found `{m.render(where.mask)}`",
                             at("mask"), "use `mask = causal` or `causal & padding(side = left)`"))
        if where.position is not None:
            problems.append((f"{name} has no positions: {order}", at("position"),
                             "remove `position`"))
        if where.kv_heads not in (None, heads):
            problems.append((kv_heads[0], at("kv_heads"), kv_heads[1]))
        if where.dropout:
            problems.append((f"attention dropout needs attention weights; {name} has none",
                             e["dropout"].key_span, "remove `dropout`"))
        return problems

    def layer(self, site: Site, value: Any, x: str, cache: int | None) -> str:
        """With `own_layer`: its nodes from the attention's input x (B, L, d_model) to the
        merged heads (B, L, width) o_proj reads; `cache`: the layer's index when decoding
        (its `states` read from past_key_values.{i}.<state>, written to present.{i}.<state>)."""
        raise NotImplementedError

    def own_weights(self, spec: Any, prefix: str) -> list:
        """With `own_layer`: the tensors (weight_table.Weight) in place of the q, k and v
        projections, in the order a seed draws them."""
        return []

    def state_type(self, spec: Any, state: str) -> Any:
        """The type (shapes.TensorType) of one of its `states` in the attention `spec`."""
        raise NotImplementedError

    def form(self, node: Any) -> tuple[str, tuple[str, ...], tuple]:
        """With `own_layer`: the planner's line for its `kernel` node, the same on every
        target: (the form's name, why, its parameters as (name, value) pairs)."""
        raise NotImplementedError

    def planned(self, node: Any, provider: str | None, dtype: str) -> dict:
        """With `own_layer`: the attributes of its `kernel` node the planner sets for a
        planned target's `provider` (None: a target for any runtime) and `dtype` (a fused
        kernel the provider has, `targets.has_kernel`), or {} (its node as built)."""
        return {}

    def run(self, xp: Any, args: list, tensors: list, real: Callable[[], Any],
            branch: Callable, **attrs: Any) -> Any:
        """With `own_layer`: its `kernel` node's arithmetic over `xp`: `args` the node's
        arguments, `tensors` the arrays its `weights` attribute names, `real()` its real
        tokens (B, L) float32 or None (every token): a decoding call's from attention_mask,
        one pass's from the keys its `padding` attribute shows (asked for when needed: the
        ONNX graph's node order). `branch(cond, ((name, then), (name, otherwise)))` runs
        `then()` where `cond()` holds, else `otherwise()` (ONNX: an If of two named
        subgraphs)."""
        raise NotImplementedError
