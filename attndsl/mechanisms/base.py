"""What a mechanism is: one module that carries every facet of one attention mechanism (its
key and values, its checks, its weights, its nodes at a hook point of the attention, its
arithmetic over the array namespace, and what a target must know of it).

The hook points, in the order an attention reaches them:

- `projected`: q (B, L, heads * head_dim) and k (B, n, kv_heads * head_dim) as projected,
  before the heads are split (`expand(..., x, part)` once for each);
- `heads`: q and k heads as split, before positions (RoPE);
- `rotated`: q and k heads after positions (RoPE) and the `heads` hook, before the cache and
  the core; a mechanism here emits nodes on q and k (`expand(..., x, part)` once for each);
- `query`: the query heads the core reads (after `rotated`), keys untouched;
- `keys`: which keys each query may see beyond the mask: a mechanism here gives the core a
  selection (B, L, n), -inf on the visible keys it drops and 0 elsewhere, read as the core's score
  bias `indexed` (a projection form that supports it asks it for its nodes, `selection`,
  which end in a `select_keys` node naming it; its arithmetic is `select`, and `cost` says
  in `explain` what choosing the keys costs);
- `scores`: the core's float32 scores (B, heads, L, n), after their scale and bias, before
  the mask: the `attention` core node carries its value under the mechanism's key
  (`ops.core_attributes`); its decomposition emits the mechanism's nodes
  (`expand(..., s, "scores")`, `ir.decompose`), and every fused strategy applies it with
  `apply` (a kernel that takes it natively says so in its strategy's `takes`);
- `softmax`: the core's masked softmax: a mechanism here names an attribute of the core node
  (and of its decomposition's `softmax` node) it sets (`softmax_attr`), whose value
  (`softmax`) is the weight of one extra logit per head that joins the softmax's
  denominator; the backends read it through `mechanisms.softmax_logits`, a strategy whose
  kernel takes it natively says so in its `takes`;
- `merged`: the core's merged heads (B, L, heads * its value width), before o_proj; a
  mechanism here may also widen the core (`core`) and give it other values (`values`, on the
  (cached) value heads);
- `output`: the attention's output after o_proj (B, L, d_model), part `out`.

A mechanism may apply at hooks besides its own (`also`), and carry decoding states of its own
per layer (`states`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["HOOKS", "Mechanism", "Site", "Where"]

HOOKS = ("projected", "heads", "rotated", "query", "keys", "scores", "softmax", "merged",
         "output")


@dataclass(frozen=True)
class Site:
    """Where a mechanism's nodes go: the graph builder, the attention's spec, its value-name
    prefix `p`, its weight prefix, the position inputs a decoding graph reads (`pos`), the
    length symbol of its keys (`n`), and when decoding the layer's index (`cache`: its
    `states` are past_key_values.{cache}.<state> and present.{cache}.<state>)."""

    b: Any  # ir.graph.GraphBuilder
    spec: Any  # spec.Attention
    p: str
    prefix: str
    pos: tuple[str, ...]
    n: str
    layer: int = 0  # its index in the stack
    cache: int | None = None


@dataclass(frozen=True)
class Where:
    """What a mechanism's `conflicts` may read of the attention being checked: its other
    entries (key -> ast.Entry), kernel, heads and kv heads, and `at(key)`, where an entry is
    written (for a located diagnostic)."""

    entries: dict
    kernel: Any
    heads: int
    kv_heads: int
    at: Callable[[str], Any]


class Mechanism:
    """One mechanism. A module `attndsl/mechanisms/<name>.py` defines `MECHANISM`, an
    instance of a subclass; `attndsl/mechanisms/__init__.py` finds it by its presence."""

    key: str  # the attention key that sets it (`key = call(...)`)
    hook: str  # one of HOOKS
    also: tuple[str, ...] = ()  # the hooks it also applies at (its `expand` there too)
    # its values: call name -> ((parameter, required), ...); `none` (absent) is always a value
    forms: ClassVar[dict[str, tuple[tuple[str, bool], ...]]] = {}
    # whether it combines with a projection form (`base_projection.Projection`; if not, a form
    # that replaces the projections it reads refuses it with the one message it gives every
    # key it excludes)
    with_projection: bool = False
    # with a recurrent kernel (its own projections, no softmax core: `base_recurrent`): why it
    # does not apply there, or None where its own `conflicts` refuses it
    with_recurrent: str | None = "the kernel has no softmax core"
    # the IR attributes of its `apply` nodes (after `mechanism`), each a plain value
    attributes: tuple[str, ...] = ()
    # at `scores` or `softmax`: how a reason names it (an article and a noun), where a kernel
    # or a torch path cannot apply it
    described: str = ""
    # plain words it takes besides `none` (`key = word`), where it has no call forms
    words: tuple[str, ...] = ()
    # at `softmax`: the `softmax` op's attribute it sets
    softmax_attr: str = ""
    # whether a core selector's variant (`base_selector.Selector`) may set its own value
    per_variant: bool = False
    # whether its `apply` nodes read the tokens' positions (then the node's second operand is
    # position_ids when decoding; else the backends pass positions 0 .. n-1)
    reads_positions: bool = False
    # a language model's head: the transformer key that applies it to the logits (B, L,
    # vocab) too, after logit_scale (it needs `vocab`), or ""; its value `read_head`, its
    # nodes `head`; the stack holds it in `Transformer.logit_mechanisms`
    head_key: str = ""
    # with `head_key`: the Hugging Face config field holding its value, a number (the import
    # writes `head_key = value` for a language model's head), or ""
    head_field: str = ""
    # the Hugging Face config fields it reads, each with its declared type (`hf_fields.TYPES`:
    # (kind, lower bound)), and those the import may leave unread, with why (`hf_fields.INERT`)
    hf_types: ClassVar[dict[str, tuple[str, float | None]]] = {}
    hf_inert: ClassVar[dict[str, str]] = {}
    # at `keys`: what choosing the keys costs, beside its attention's strategy (`explain`)
    cost: str = ""

    def hook_of(self, value: Any) -> str:
        """Its hook for this value (one of HOOKS; `hook` unless the value moves it)."""
        return self.hook

    def read(self, c: Any, e: Any) -> Any:
        """The spec's value of `key = e` (None for `none`), or raise the checker's located
        diagnostic (`c` is the checker: `c.call(e, forms, what)`, `c.number`, `c.error`)."""
        raise NotImplementedError

    def read_norm(self, c: Any, e: Any) -> Any:
        """`read` for a mechanism whose values are norms (`forms`: each norm's parameters):
        the spec's `blocks.Norm`, None for `none`."""
        if getattr(e, "id", None) == "none":
            return None
        from ..check.values import Param

        table = {name: tuple(Param(p, required) for p, required in params)
                 for name, params in self.forms.items()}
        return c.norm_value(e, placement=False, table=table)[0]

    def read_head(self, c: Any, e: Any) -> Any:
        """With `head_key`: the stack's value of `head_key = e` (None for `none`), or raise
        the checker's located diagnostic."""
        raise NotImplementedError

    def head(self, b: Any, value: Any, x: str, out: str, shape: Any) -> str:
        """With `head_key`: its nodes on the logits `x` (type `shape`, (B, L, vocab)), the
        last named `out`; the value they make."""
        raise NotImplementedError

    def conflicts(self, c: Any, value: Any, where: Where) -> bool:
        """Report where the value cannot apply (beside the projection-form and
        recurrent-kernel rules above); True if it reported any."""
        return False

    def weights(self, value: Any, spec: Any, prefix: str) -> list[Any]:
        """Its tensors (`weight_table.Weight`), in the order a seeded module draws them."""
        return []

    def states(self, value: Any, spec: Any, reused: bool = False) -> tuple[tuple[str, Any], ...]:
        """A decoding call's states of its own in the attention `spec`, beside its keys and
        values: (name, shapes.TensorType) each (`reused`: a layer reading an earlier layer's
        keys and values)."""
        return ()

    def query_rows(self, spec: Any, value: Any) -> int:
        """The rows it adds to each head's block of the query projection (q_proj holds, per
        head, head_dim query rows, then each mechanism's rows in order)."""
        return 0

    def projected(self, site: Site, value: Any, q: str) -> str:
        """The queries (B, L, heads * head_dim) from the query projection's output, whose
        extra rows are its own (`query_rows`)."""
        return q

    def core(self, spec: Any, value: Any) -> Any:
        """The attention its core runs as (at `merged`: a mechanism that pairs the values
        widens it)."""
        return spec

    def values(self, site: Site, value: Any, v: str) -> str:
        """The value heads its core reads, from the (cached) value heads `v`."""
        return v

    def expand(self, site: Site, value: Any, x: str, part: str) -> str:
        """Its nodes on the heads `x` (part `q` or `k`; at `projected`, the projections'
        outputs, `v` too) at its hook; the value they make."""
        raise NotImplementedError

    def softmax(self, site: Site, value: Any) -> Any:
        """At `softmax`: the value of its attribute of the core's `softmax` node."""
        raise NotImplementedError

    def apply(self, xp: Any, x: Any, pos: Any, **attrs: Any) -> Any:
        """The arithmetic of its `apply` nodes over the array namespace `xp` (torch and
        ONNX from this one text): x (B, h, n, d) heads, pos int64 positions (n, 1) or
        (B, 1, n, 1) when decoding."""
        raise NotImplementedError

    def select(self, xp: Any, *operands: Any, **attrs: Any) -> Any:
        """At `keys`: the arithmetic of its `select_keys` node over the array namespace `xp`
        (its operands, its attributes after `mechanism`): float32 (B, L, n), -inf's stand-in
        on the visible keys each query drops, 0 elsewhere."""
        raise NotImplementedError
