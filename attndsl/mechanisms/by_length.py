"""Choosing the core by length (docs/LANGUAGE.md, Choosing the core by length):
`by_length = [up_to(n1, key = value, ...), ..., otherwise(key = value, ...)]` runs, at query
length L, the first variant whose threshold holds L (the last: every longer length); each
variant is the attention with its own mask, kernel, sparsity, scale and the mechanisms a
variant may set (`Mechanism.per_variant`), every one sharing the layer's projections. Its
value and checks, its `switch` node, the lengths verify checks on both sides of every
threshold, what show names, and why decoding and torch.export refuse it. The oracle reads
the switch on its own (backends/reference.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from .. import ast
from ..ir.graph import Op
from .base_selector import Selector

__all__ = ["SELECTOR", "Variant"]


@dataclass(frozen=True)
class Variant:
    """One core of a `by_length` attention: it serves query lengths up to `up_to` (and above
    the previous variant's), every longer length when None. `attention` is the layer with this
    variant's mask, kernel, sparsity, scale and the mechanisms a variant may set."""

    selector: ClassVar[str] = "by_length"
    up_to: int | None
    attention: Any


def variant_for(spec: Any, L: int) -> Variant | None:
    """The by_length variant that serves query length L (None without by_length)."""
    return next((v for v in spec.variants if v.up_to is None or v.up_to >= L), None)


def variant_keys() -> tuple[str, ...]:
    """The keys a variant may set: the core's own, and the mechanisms a variant may set."""
    from . import MECHANISMS

    return ("mask", "kernel", "sparsity", "scale",
            *(key for key, m in MECHANISMS.items() if m.per_variant))


def _named(described: str) -> str:
    """A kernel's name from its description, as a word before `layer`: its words after the
    article, less ` kernel`, joined by hyphens (`the gated xyz rule` -> `gated-xyz-rule`)."""
    return described.split(" ", 1)[1].removesuffix(" kernel").replace(" ", "-")


class ByLength(Selector):
    key = "by_length"
    undecodable = ("chooses its core by the sequence's length, which a decoding step does not "
                   "know (a step sees one token)", "decode with one core: remove by_length")
    unexportable = ("chooses its core by length, which a torch.export program cannot hold "
                    "yet: torch.cond branches with tensor constants fail to serialize "
                    "(pytorch/pytorch#180354)",
                    "export it as ONNX (`--export onnx`, every target): one `If` per "
                    "threshold")

    def read(self, c: Any, d: Any, e: Any) -> tuple[Variant, ...] | None:
        """`[up_to(n1, key = value, ...), ..., otherwise(key = value, ...)]`: the core each
        range of query lengths runs, L <= n1 the first; every variant is the attention with
        its own `mask`, `kernel`, `sparsity`, `scale` and the mechanisms a variant may set
        (`Mechanism.per_variant`)."""
        from . import kernel_of

        if not isinstance(e, ast.List) or len(e.items) < 2:
            raise c.error("by_length takes a list of variants: `up_to(n, ...)` for each "
                          "range of lengths, then `otherwise(...)`", e.span,
                          hint="for example `by_length = [up_to(2000), otherwise(kernel = "
                               "linear)]`")
        keys = variant_keys()
        variants: list[Variant] = []
        below = 0
        for i, item in enumerate(e.items):
            name, span = c.callee(item, dict.fromkeys(("up_to", "otherwise")),
                                  "a by_length variant")
            args = item.args if isinstance(item, ast.Call) else ()
            last = i == len(e.items) - 1
            if (name == "otherwise") != last:
                raise c.error("`otherwise(...)` comes last, once: it serves every longer "
                              "length" if name == "otherwise" else
                              "the last variant must be `otherwise(...)`, so every length "
                              "has a core", span)
            given = [a for a in args if a.name is None]
            if len(given) != (name == "up_to"):
                raise c.error(f"`{name}` takes {'one length, then' if name == 'up_to' else ''}"
                              f" keys by name: `{name}({'n, ' if name == 'up_to' else ''}"
                              "mask = ...)`", item.span)
            up_to = None
            if name == "up_to":
                up_to = c.positive(given[0].value, "a by_length threshold")
                if up_to <= below:
                    raise c.error(f"thresholds must increase: {up_to} follows {below}",
                                  given[0].value.span)
                below = up_to
            overrides = {}
            for a in args:
                if a.name is None:
                    continue
                if a.name not in keys:
                    raise c.error(f"a variant sets {', '.join(keys)}; `{a.name}` "
                                  "is shared by every variant", a.name_span,
                                  hint=f"set `{a.name}` in the attention itself")
                if a.name in overrides:
                    raise c.error(f"`{a.name}` is set twice", a.name_span)
                overrides[a.name] = ast.Entry(key=a.name, key_span=a.name_span,
                                              value=a.value, span=a.span)
            entries = tuple(x for x in d.entries
                            if x.key != "by_length" and x.key not in overrides)
            sub = ast.AttentionDef(name=f"{d.name}#{i}", name_span=d.name_span,
                                   entries=entries + tuple(overrides.values()), span=d.span)
            before = len(c.diags)
            attn = c.attention(sub)
            for j in range(before, len(c.diags)):  # say which variant made the conflict
                d_ = c.diags[j]
                c.diags[j] = replace(d_, notes=(*d_.notes, ("in this by_length variant",
                                                            item.span)))
            if attn is None:
                return None
            variants.append(Variant(up_to, replace(attn, name=d.name)))
        for item, v in zip(e.items, variants, strict=True):
            module = kernel_of(v.attention.kernel)
            if module is not None and module.own_projections:
                raise c.error(f"a by_length variant cannot use {module.described}: "
                              f"{module.own_projections}", item.span,
                              hint=f"give the {_named(module.described)} layer its own "
                                   "attention")
        modules = [kernel_of(v.attention.kernel) for v in variants]
        twice = next((k for k in modules if k and k.per_layer and modules.count(k) > 1), None)
        if twice is not None:
            raise c.error(f"at most one variant may use {twice.described} "
                          f"({twice.per_layer})", e.span)
        return tuple(variants)

    def switch(self, b: Any, spec: Any, p: str, args: tuple[str, ...], out: Any,
               build: Callable[[Any, str], tuple[tuple, str]]) -> str:
        """One branch per variant (its nodes under `{p}variant{i}.`), projections shared; the
        node's `up_to`: every threshold but the last variant's (None)."""
        branches, outs = [], []
        for i, variant in enumerate(spec.variants):
            nodes, o = build(variant.attention, f"{p}variant{i}.")
            outs.append(o)
            branches.append(nodes)
        return b.emit(Op.SWITCH, f"{p}merged", args, out,
                      up_to=tuple(v.up_to for v in spec.variants[:-1]),
                      branches=tuple(branches), outputs=tuple(outs))

    def lengths(self, spec: Any) -> dict[int, str]:
        """Both sides of every threshold n: n and n + 1."""
        chosen: dict[int, str] = {}
        for v in spec.variants:
            if v.up_to is not None:
                chosen.setdefault(v.up_to, f"the last length of by_length up_to({v.up_to})")
                chosen.setdefault(v.up_to + 1, f"the first length past up_to({v.up_to})")
        return chosen

    def serving(self, spec: Any, L: int) -> Any:
        return variant_for(spec, L).attention

    def longest(self, spec: Any, L: int) -> int | None:
        return variant_for(spec, L).up_to

    def label(self, spec: Any, L: int) -> str:
        """' (by_length: L <= n)' (or L > n, the last) for the variant that serves L."""
        variant = variant_for(spec, L)
        if variant.up_to is not None:
            return f" (by_length: L <= {variant.up_to})"
        return f" (by_length: L > {spec.variants[-2].up_to})"


SELECTOR = ByLength()
