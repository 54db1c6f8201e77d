"""AST -> resolved spec (`Program`), with every default filled in. All errors in a file are
collected and raised together as one SpecError, in source order.

The checks live in four layers of one class: `values.py` (diagnostics, constants, arithmetic,
calls), `masks.py` (mask expressions), `layers.py` (attention keys, norms) and `stacks.py`
(transformer keys)."""

from __future__ import annotations

from .. import ast
from .. import masks as m
from ..errors import Diagnostic, SpecError
from ..source import Span
from ..spec import Attention, Program, Transformer
from .layers import MAX_SCALE, MAX_WEIGHT_BYTES
from .masks import (
    INDEX_NAMES,
    MASK_PRIMITIVES,
    MAX_MASK_DEPTH,
    MAX_MASK_PRIMITIVES,
    MAX_RANDOM_BLOCKS,
)
from .stacks import Stacks
from .values import Invalid

__all__ = ["MAX_MASK_DEPTH", "MAX_MASK_PRIMITIVES", "MAX_RANDOM_BLOCKS", "MAX_SCALE",
           "MAX_WEIGHT_BYTES", "check"]


def check(module: ast.Module) -> Program:
    """Resolve and validate a module; raise SpecError with every problem found."""
    return _Checker(module).run()


class _Checker(Stacks):
    def __init__(self, module: ast.Module):
        self.module = module
        self.diags: list[Diagnostic] = []
        self.lets: dict[str, ast.LetDef] = {}
        self.masks: dict[str, ast.MaskDef] = {}
        self.attentions: dict[str, ast.AttentionDef] = {}
        self.let_values: dict[str, int | float] = {}
        self.mask_values: dict[str, m.Mask] = {}
        self.resolved_attn: dict[str, Attention | None] = {}
        self.stacks: dict[str, Transformer | None] = {}  # the stacks checked so far
        self._evaluating: list[tuple[str, Span]] = []
        self._failed: set[str] = set()  # definitions already diagnosed: never report twice
        self._mask_size: dict[int, tuple[int, int]] = {}  # id(mask) -> (primitives, depth)
        self._keep: list[m.Mask] = []

    def run(self) -> Program:
        seen: dict[str, ast.Definition] = {}
        for d in self.module.definitions:
            if d.name in seen:
                self.error(f"`{d.name}` is defined twice", d.name_span,
                           hint="give each definition in a file its own name",
                           notes=(("first defined here", seen[d.name].name_span),))
                continue
            if d.name in INDEX_NAMES and isinstance(d, ast.LetDef | ast.MaskDef):
                self.error(f"`{d.name}` names {INDEX_NAMES[d.name]} in masks", d.name_span,
                           hint="choose another name")
                continue
            seen[d.name] = d
            if isinstance(d, ast.LetDef):
                self.lets[d.name] = d
            elif isinstance(d, ast.MaskDef):
                if d.name in MASK_PRIMITIVES:
                    self.error(f"mask name `{d.name}` hides the built-in `{d.name}` mask",
                               d.name_span, hint="choose another name")
                self.masks[d.name] = d
            elif isinstance(d, ast.AttentionDef):
                self.attentions[d.name] = d
        layers: dict[str, Attention | Transformer] = {}
        for d in self.module.definitions:
            if seen.get(d.name) is not d:
                continue
            try:
                if isinstance(d, ast.LetDef):
                    self.let_value(d.name, d.name_span)
                elif isinstance(d, ast.MaskDef):
                    self.mask_def(d.name, d.name_span)
                elif isinstance(d, ast.AttentionDef):
                    attn = self.attention(d)
                    if attn is not None:
                        layers[d.name] = attn
                else:
                    self.stacks[d.name] = None  # (until it is checked)
                    tr = self.transformer(d)
                    if tr is not None:
                        layers[d.name] = self.stacks[d.name] = tr
            except Invalid:
                pass
        if self.diags:
            self.diags.sort(key=lambda x: x.span.start if x.span else -1)
            raise SpecError(self.diags)
        return Program(source=self.module.span.source, layers=layers)
