"""Mechanisms as modules: each `attndsl/mechanisms/<name>.py` carries every facet of one
mechanism (its key and values, its checks, its weights, its nodes, its arithmetic over the
array namespace, its target facts), found by its presence: adding one edits no table. A module
defines one of `MECHANISM` (`base.Mechanism`: at a hook point of the attention), `KERNEL`
(`base_kernel.Kernel`: `kernel = name(...)`), `FFN` (`base_ffn.FeedForward`: `ffn = name(...)`) or
`PROJECTION` (`base_projection.Projection`: queries, keys and values from projections of its
own) or `SELECTOR` (`base_selector.Selector`: the core chosen at run time among several); one
with none of them is a module's helper (`<name>_*.py`: arithmetic that would pass
400 lines). The checker, the language server, the IR, the weight table, the planner and the
backends ask here."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from .base import HOOKS, Mechanism, Site, Where
from .base_ffn import FeedForward
from .base_kernel import Kernel, KernelWhere
from .base_projection import Projection, ProjectionWhere
from .base_selector import Selector

__all__ = ["APPLIERS", "FFNS", "HEADS", "HOOKS", "KERNELS", "MECHANISMS", "PROJECTIONS", "SCORED",
           "SELECTORS", "SOFTMAX", "SOFTMAX_ATTRS", "FeedForward", "Kernel", "KernelWhere",
           "Mechanism", "Projection", "ProjectionWhere", "Selector", "Site", "Where", "at", "core",
           "expand", "ffn_of", "kernel_fact", "kernel_of", "modifiers", "projected",
           "projection_of", "query_rows", "score", "selector_of", "softmax_attrs", "softmax_logits",
           "states_of"]


def _found() -> tuple[dict[str, Mechanism], dict[str, Kernel], dict[str, FeedForward],
                      dict[str, Projection], dict[str, Selector]]:
    """Every module of the package but the `base*` ones, by what it defines: `MECHANISM`,
    `KERNEL`, `FFN`, `PROJECTION` or `SELECTOR` (a module defining none is a module's helper,
    its arithmetic)."""
    found, kernels, ffns, projections, selectors = [], {}, {}, {}, {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("base"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "KERNEL"):
            kernels[module.KERNEL.name] = module.KERNEL
        elif hasattr(module, "FFN"):
            ffns[module.FFN.name] = module.FFN
        elif hasattr(module, "PROJECTION"):
            projections[module.PROJECTION.key] = module.PROJECTION
        elif hasattr(module, "SELECTOR"):
            selectors[module.SELECTOR.key] = module.SELECTOR
        elif hasattr(module, "MECHANISM"):
            found.append(module.MECHANISM)
    found.sort(key=lambda m: (HOOKS.index(m.hook), m.key))
    return {m.key: m for m in found}, kernels, ffns, projections, selectors


# the mechanisms at hook points by key; the kernel modules (`kernel = name(...)`) by name;
# the feed-forward forms (`ffn = name(...)`) by name; the projection forms and the core
# selectors by attention key
MECHANISMS, KERNELS, FFNS, PROJECTIONS, SELECTORS = _found()
# the score modifiers (hook `scores`), in order: what a fused attention node may carry
SCORED: dict[str, Mechanism] = {k: m for k, m in MECHANISMS.items() if m.hook == "scores"}
# the mechanisms at the `softmax` hook, in order, and the attributes they set on the core's
# softmax (each the weight of an extra logit per head: `softmax_logits`)
SOFTMAX: dict[str, Mechanism] = {k: m for k, m in MECHANISMS.items() if m.hook == "softmax"}
SOFTMAX_ATTRS: tuple[str, ...] = tuple(m.softmax_attr for m in SOFTMAX.values())
# the mechanisms a language model's head may apply to its logits, by their transformer key
# (`Mechanism.head_key`), in order
HEADS: dict[str, Mechanism] = {m.head_key: m for m in MECHANISMS.values() if m.head_key}
# the modules whose arithmetic an `apply` node runs, by the key it names: the mechanisms, and
# the projection forms with nodes of their own (`Projection.attributes`: a mixture of heads)
APPLIERS: dict[str, Mechanism | Projection] = {
    **MECHANISMS, **{k: f for k, f in PROJECTIONS.items() if f.attributes}}


def kernel_of(value: Any) -> Kernel | None:
    """The kernel module of a spec's `kernel` value (its class's `name`), or None for the
    softmax."""
    return KERNELS.get(getattr(type(value), "name", None))


def kernel_fact(value: Any, facet: str) -> Any:
    """A facet of the kernel module of a spec's `kernel` value, or the base class's default,
    which is the softmax's (`shares_keys`, `own_layer`, `states`, ...: `base_kernel.Kernel`)."""
    return getattr(kernel_of(value) or Kernel, facet)


def ffn_of(value: Any) -> FeedForward | None:
    """The feed-forward module of a stack's `Transformer.feed_forward` value, or None."""
    return FFNS.get(getattr(type(value), "name", None))


def projection_of(value: Any) -> Projection | None:
    """The projection form of an attention's `Attention.projection` value (its class's
    `key`), or None."""
    return PROJECTIONS.get(getattr(type(value), "key", None))


def selector_of(variants: Any) -> Selector | None:
    """The core selector of an attention's `Attention.variants` (its variants' class's
    `selector`), or None for one core."""
    return SELECTORS.get(getattr(type(variants[0]), "selector", None)) if variants else None


def softmax_attrs(site: Site) -> dict[str, Any]:
    """The attributes the `softmax` hook's mechanisms give the core's `softmax` node (each
    None where the attention does not set its mechanism)."""
    values = dict(site.spec.mechanisms)
    return {m.softmax_attr: m.softmax(site, values[key]) if key in values else None
            for key, m in SOFTMAX.items()}


def softmax_logits(node: Any) -> str | None:
    """The weight (heads,) of the extra logit per head that joins the softmax's denominator
    of `node` (an `attention` core, planned or not, or its decomposition's `softmax` node),
    set by a `softmax` hook mechanism (`Mechanism.softmax`), or None. The backends read it
    here and pass it to `formulas.masked_softmax` as its `extra_logit`; a kernel that takes it
    natively says so in its strategy's `takes`."""
    attrs = dict(node.attrs)
    return next((attrs[a] for a in SOFTMAX_ATTRS if attrs.get(a) is not None), None)


def modifiers(node: Any) -> list[tuple[Mechanism, Any]]:
    """The score modifiers a fused attention node carries, with their values, in order."""
    return [(m, node.attr(key)) for key, m in SCORED.items() if node.attr(key) is not None]


def score(xp: Any, node: Any, s: Any) -> Any:
    """A fused attention node's float32 scores after every score modifier it carries."""
    for mechanism, value in modifiers(node):
        s = mechanism.apply(xp, s, None, **{mechanism.key: value})
    return s


def at(spec: Any, hook: str) -> list[tuple[Mechanism, Any]]:
    """The mechanisms an attention sets at `hook` (their own, or one they `also` apply at),
    with their values, in order."""
    return [(MECHANISMS[key], value) for key, value in spec.mechanisms
            if hook in (MECHANISMS[key].hook_of(value), *MECHANISMS[key].also)]


def states_of(spec: Any, reused: bool = False) -> tuple[tuple[str, Any], ...]:
    """The decoding states the attention `spec`'s mechanisms carry, (name, type) each, in
    order (`Mechanism.states`)."""
    return tuple(state for key, value in spec.mechanisms
                 for state in MECHANISMS[key].states(value, spec, reused))


def expand(site: Site, hook: str, x: str, part: str) -> str:
    """Every mechanism's nodes at `hook` on the heads `x` (part `q` or `k`), in order."""
    for mechanism, value in at(site.spec, hook):
        x = mechanism.expand(site, value, x, part)
    return x


def core(site: Site, spec: Any, v: str) -> tuple[Any, str]:
    """The attention the core runs as and the value heads it reads, after every mechanism
    that changes them (`Mechanism.core`, `Mechanism.values`)."""
    for mechanism, value in ((MECHANISMS[k], value) for k, value in site.spec.mechanisms):
        spec, v = mechanism.core(spec, value), mechanism.values(site, value, v)
    return spec, v


def query_rows(spec: Any) -> int:
    """Each head's rows of the query projection: head_dim, then every mechanism's own."""
    return spec.head_dim + sum(MECHANISMS[key].query_rows(spec, value)
                               for key, value in spec.mechanisms)


def projected(site: Site, q: str) -> str:
    """The queries from the query projection's output (each mechanism takes its rows)."""
    for key, value in site.spec.mechanisms:
        q = MECHANISMS[key].projected(site, value, q)
    return q
