"""AST -> resolved spec (`Program`), with every default filled in. All errors in a file are
collected and raised together as one SpecError, in source order."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import ast
from . import masks as m
from .errors import Diagnostic, SpecError
from .source import Span
from .spec import (
    Alibi,
    Attention,
    Ffn,
    Learned,
    LinearKernel,
    Norm,
    Position,
    Program,
    RelativeBias,
    Rope,
    Sinusoidal,
    Softmax,
    Sparsity,
    Transformer,
)

__all__ = ["MAX_MASK_DEPTH", "MAX_MASK_PRIMITIVES", "MAX_RANDOM_BLOCKS", "MAX_SCALE",
           "MAX_WEIGHT_BYTES", "check"]

MAX_WEIGHT_BYTES = 2 * 1024**3 - 64 * 1024**2  # one ONNX protobuf file, with room for the graph
MAX_MASK_PRIMITIVES = 256  # after named masks are inlined
MAX_MASK_DEPTH = 64
MAX_RANDOM_BLOCKS = 64  # each draw is unrolled into the graph
MAX_SCALE = 1e6  # beyond, float32 scores overflow for ordinary inputs
_MAX_INT = 1 << 62
_MAX_LIST = 4096
_FLOAT32_MAX = 3.4028234663852886e38
_FLOAT32_TINY = 1.1754943508222875e-38  # smallest normal float32


class _Invalid(Exception):
    """Raised inside the checker after a diagnostic was recorded; the key is skipped."""


@dataclass(frozen=True)
class _Param:
    name: str
    required: bool = False


def check(module: ast.Module) -> Program:
    """Resolve and validate a module; raise SpecError with every problem found."""
    return _Checker(module).run()


class _Checker:
    def __init__(self, module: ast.Module):
        self.module = module
        self.diags: list[Diagnostic] = []
        self.lets: dict[str, ast.LetDef] = {}
        self.masks: dict[str, ast.MaskDef] = {}
        self.attentions: dict[str, ast.AttentionDef] = {}
        self.let_values: dict[str, int] = {}
        self.mask_values: dict[str, m.Mask] = {}
        self.resolved_attn: dict[str, Attention | None] = {}
        self._evaluating: list[tuple[str, Span]] = []
        self._failed: set[str] = set()  # definitions already diagnosed: never report twice
        self._mask_size: dict[int, tuple[int, int]] = {}  # id(mask) -> (primitives, depth)
        self._keep: list[m.Mask] = []

    # -- plumbing ---------------------------------------------------------------------------
    def error(self, message: str, span: Span | None, hint: str | None = None,
              notes: tuple[tuple[str, Span], ...] = ()) -> _Invalid:
        self.diags.append(Diagnostic(message, span, hint, notes))
        return _Invalid()

    def run(self) -> Program:
        seen: dict[str, ast.Definition] = {}
        for d in self.module.definitions:
            if d.name in seen:
                self.error(f"`{d.name}` is defined twice", d.name_span,
                           hint="give each definition in a file its own name",
                           notes=(("first defined here", seen[d.name].name_span),))
                continue
            seen[d.name] = d
            if isinstance(d, ast.LetDef):
                self.lets[d.name] = d
            elif isinstance(d, ast.MaskDef):
                if d.name in _MASK_PRIMITIVES:
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
                    tr = self.transformer(d)
                    if tr is not None:
                        layers[d.name] = tr
            except _Invalid:
                pass
        if self.diags:
            self.diags.sort(key=lambda x: x.span.start if x.span else -1)
            raise SpecError(self.diags)
        return Program(source=self.module.span.source, layers=layers)

    # -- integers and constants ---------------------------------------------------------------
    def let_value(self, name: str, use: Span) -> int:
        if name in self.let_values:
            return self.let_values[name]
        if name in self._failed:
            raise _Invalid()
        d = self.lets[name]
        if any(n == name for n, _ in self._evaluating):
            cycle = [n for n, _ in self._evaluating] + [name]
            start = cycle.index(name)
            self._failed.update(cycle)
            raise self.error(f"`let` constants refer to each other in a cycle: "
                             f"{' -> '.join(cycle[start:])}", d.name_span,
                             hint="a constant must not depend on itself")
        self._evaluating.append((name, use))
        try:
            value = self.integer(d.value, allow_negative=True)
        except _Invalid:
            self._failed.add(name)
            raise
        finally:
            self._evaluating.pop()
        self.let_values[name] = value
        return value

    def integer(self, e: ast.Expr, allow_negative: bool = False) -> int:
        value = self._int_expr(e)
        if not allow_negative and value < 0:
            raise self.error(f"expected a non-negative integer, found {value}", e.span)
        return value

    def _int_expr(self, e: ast.Expr) -> int:
        match e:
            case ast.Int(value=v):
                value = v
            case ast.Paren(inner=inner):
                value = self._int_expr(inner)
            case ast.Neg(operand=x):
                value = -self._int_expr(x)
            case ast.Name(id=name):
                if name in self.lets:
                    value = self.let_value(name, e.span)
                else:
                    raise self.error(f"unknown constant `{name}`", e.span,
                                     hint=self._suggest(name, self.lets, "define it with `let"
                                                        f" {name} = ...`"))
            case ast.BinOp(op=op, left=a, right=b) if op in "+-*//":
                x, y = self._int_expr(a), self._int_expr(b)
                if op == "//" and y == 0:
                    raise self.error("integer division by zero", b.span)
                value = {"+": x + y, "-": x - y, "*": x * y}.get(op)
                if op == "//":
                    value = x // y
            case ast.Float():
                raise self.error("expected an integer, found a float", e.span)
            case _:
                raise self.error(f"expected an integer, found {_describe(e)}", e.span)
        if abs(value) > _MAX_INT:
            raise self.error(f"integer is too large (limit is 2**62 = {_MAX_INT})", e.span)
        return value

    def positive(self, e: ast.Expr, what: str) -> int:
        value = self.integer(e, allow_negative=True)
        if value <= 0:
            raise self.error(f"{what} must be a positive integer, found {value}", e.span)
        return value

    def random_blocks(self, e: ast.Expr) -> int:
        value = self.positive(e, "random blocks")
        if value > MAX_RANDOM_BLOCKS:
            raise self.error(f"random blocks must be at most {MAX_RANDOM_BLOCKS}, found "
                             f"{value}", e.span, hint="each draw is a step of the exported "
                             "graph; more draws than that approach dense attention anyway")
        return value

    def non_negative(self, e: ast.Expr, what: str) -> int:
        value = self.integer(e, allow_negative=True)
        if value < 0:
            raise self.error(f"{what} must be >= 0, found {value}", e.span)
        return value

    def number(self, e: ast.Expr) -> float:
        match e:
            case ast.Float(value=v):
                return v
            case ast.Neg(operand=x):
                return -self.number(x)
            case ast.Paren(inner=x):
                return self.number(x)
            case _:
                return float(self.integer(e, allow_negative=True))

    def word(self, e: ast.Expr, choices: tuple[str, ...], what: str) -> str:
        if isinstance(e, ast.Name) and e.id in choices:
            return e.id
        found = f"`{e.id}`" if isinstance(e, ast.Name) else _describe(e)
        hint = None
        if isinstance(e, ast.Name):
            hint = self._suggest(e.id, choices, None)
        raise self.error(f"{what} must be one of {_one_of(choices)}; found {found}", e.span,
                         hint=hint)

    def boolean(self, e: ast.Expr, what: str) -> bool:
        return self.word(e, ("true", "false"), what) == "true"

    def _suggest(self, name: str, candidates: Any, fallback: str | None) -> str | None:
        close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
        return f"did you mean `{close[0]}`?" if close else fallback

    # -- calls --------------------------------------------------------------------------------
    def bind(self, e: ast.Expr, name: str, params: tuple[_Param, ...]) -> dict[str, ast.Expr]:
        """Arguments of a call (or a bare name, meaning all defaults) by parameter name."""
        if isinstance(e, ast.Name):
            missing = [p.name for p in params if p.required]
            if missing:
                raise self.error(f"`{name}` needs arguments: {', '.join(missing)}", e.span,
                                 hint=f"write `{name}({', '.join(p + ' = ...' for p in missing)})`")
            return {}
        assert isinstance(e, ast.Call)
        if not params and e.args:
            raise self.error(f"`{name}` takes no arguments", e.args[0].span,
                             hint=f"write `{name}`")
        bound: dict[str, ast.Expr] = {}
        names = [p.name for p in params]
        positional = True
        for i, arg in enumerate(e.args):
            if arg.name is None:
                if not positional:
                    raise self.error("positional argument after a keyword argument", arg.span)
                if i >= len(params):
                    raise self.error(f"`{name}` takes at most {len(params)} argument"
                                     f"{'s' if len(params) != 1 else ''}", arg.span,
                                     hint=f"parameters: {', '.join(names)}")
                bound[params[i].name] = arg.value
                continue
            positional = False
            if arg.name not in names:
                raise self.error(f"`{name}` has no parameter `{arg.name}`", arg.name_span,
                                 hint=self._suggest(arg.name, names,
                                                    f"parameters: {', '.join(names)}"))
            if arg.name in bound:
                raise self.error(f"argument `{arg.name}` given twice", arg.name_span)
            bound[arg.name] = arg.value
        missing = [p.name for p in params if p.required and p.name not in bound]
        if missing:
            raise self.error(f"`{name}` is missing argument{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(f'`{x}`' for x in missing)}", e.span)
        return bound

    def callee(self, e: ast.Expr, table: dict[str, Any], what: str) -> tuple[str, Span]:
        if isinstance(e, ast.Call):
            name, span = e.func, e.func_span
        elif isinstance(e, ast.Name):
            name, span = e.id, e.span
        else:
            raise self.error(f"expected {what}, found {_describe(e)}", e.span,
                             hint=f"one of {_one_of(tuple(table))}")
        if name not in table:
            raise self.error(f"unknown {what} `{name}`", span,
                             hint=self._suggest(name, table, f"one of {_one_of(tuple(table))}"))
        return name, span

    # -- masks --------------------------------------------------------------------------------
    def mask_def(self, name: str, use: Span) -> m.Mask:
        if name in self.mask_values:
            return self.mask_values[name]
        if name in self._failed:
            raise _Invalid()
        d = self.masks[name]
        if any(n == name for n, _ in self._evaluating):
            cycle = [n for n, _ in self._evaluating] + [name]
            self._failed.update(cycle)
            raise self.error(f"masks refer to each other in a cycle: "
                             f"{' -> '.join(cycle[cycle.index(name):])}", d.name_span)
        self._evaluating.append((name, use))
        try:
            value = self.mask(d.value)
        except _Invalid:
            self._failed.add(name)
            raise
        finally:
            self._evaluating.pop()
        self.mask_values[name] = value
        return value

    def mask(self, e: ast.Expr) -> m.Mask:
        match e:
            case ast.Paren(inner=inner):
                return self.mask(inner)
            case ast.Not(operand=x):
                return self._bounded(m.Not(self.mask(x)), e.span)
            case ast.BinOp(op="&" | "|", left=a, right=b):
                left, right = self._mask_or_none(a), self._mask_or_none(b)
                if left is None or right is None:
                    raise _Invalid()
                both = m.And(left, right) if e.op == "&" else m.Or(left, right)
                return self._bounded(both, e.span)
            case ast.Name(id=name) if name in self.masks:
                return self.mask_def(name, e.span)
            case ast.Name() | ast.Call():
                fname = e.id if isinstance(e, ast.Name) else e.func
                if fname in self.lets and isinstance(e, ast.Name):
                    raise self.error(f"`{fname}` is an integer constant, not a mask", e.span)
                name, _ = self.callee(e, _MASK_PRIMITIVES | dict.fromkeys(self.masks), "mask")
                if name in self.masks:
                    raise self.error(f"mask `{name}` takes no arguments", e.span,
                                     hint=f"write `{name}`")
                return _MASK_PRIMITIVES[name](self, self.bind(e, name, _MASK_PARAMS[name]), e)
            case _:
                raise self.error(f"expected a mask expression, found {_describe(e)}", e.span,
                                 hint="masks are built from primitives such as `causal` and "
                                      "`window(n)` with `&`, `|`, `!`")

    def _bounded(self, mask: m.And | m.Or | m.Not, span: Span) -> m.Mask:
        """`mask`, if it stays within MAX_MASK_PRIMITIVES and MAX_MASK_DEPTH once named masks
        are expanded: names can double a mask at each use, and every backend walks the whole
        expanded tree."""
        children = (mask.operand,) if isinstance(mask, m.Not) else (mask.left, mask.right)
        sizes = [self._mask_size.get(id(c), (1, 1)) for c in children]
        size, depth = sum(s for s, _ in sizes), 1 + max(d for _, d in sizes)
        if size > MAX_MASK_PRIMITIVES or depth > MAX_MASK_DEPTH:
            raise self.error(
                f"this mask expands to {size} primitives nested {depth} deep once named masks "
                f"are inlined; the limits are {MAX_MASK_PRIMITIVES} and {MAX_MASK_DEPTH}", span,
                hint="simplify the mask: a repeated term adds nothing to `&` or `|`")
        self._mask_size[id(mask)] = (size, depth)
        self._keep.append(mask)  # ids stay unique while the checker runs
        return mask

    def _mask_or_none(self, e: ast.Expr) -> m.Mask | None:
        try:
            return self.mask(e)
        except _Invalid:
            return None

    # -- attention ----------------------------------------------------------------------------
    def entries(self, d: ast.AttentionDef | ast.TransformerDef,
                keys: tuple[str, ...]) -> dict[str, ast.Entry]:
        out: dict[str, ast.Entry] = {}
        what = "attention" if isinstance(d, ast.AttentionDef) else "transformer"
        for entry in d.entries:
            if entry.key not in keys:
                self.error(f"unknown key `{entry.key}` in {what} `{d.name}`", entry.key_span,
                           hint=self._suggest(entry.key, keys, f"keys: {', '.join(keys)}"))
            elif entry.key in out:
                self.error(f"key `{entry.key}` is set twice", entry.key_span,
                           notes=(("first set here", out[entry.key].key_span),))
            else:
                out[entry.key] = entry
        return out

    def attention(self, d: ast.AttentionDef) -> Attention | None:
        if d.name in self.resolved_attn:
            return self.resolved_attn[d.name]
        self.resolved_attn[d.name] = None
        e = self.entries(d, _ATTENTION_KEYS)
        failed = False

        def get(key: str, parse: Callable[[ast.Expr], Any], default: Any = None) -> Any:
            nonlocal failed
            if key not in e:
                return default
            try:
                return parse(e[key].value)
            except _Invalid:
                failed = True
                return None

        for key in ("d_model", "heads"):
            if key not in e:
                self.error(f"attention `{d.name}` is missing `{key}`", d.name_span,
                           hint=f"add `{key} = ...` to the block")
                failed = True
        d_model = get("d_model", lambda x: self.positive(x, "d_model"))
        heads = get("heads", lambda x: self.positive(x, "heads"))
        kv_heads = get("kv_heads", lambda x: self.positive(x, "kv_heads"), heads)
        head_dim = get("head_dim", lambda x: self.positive(x, "head_dim"))
        value_dim = get("value_dim", lambda x: self.positive(x, "value_dim"))
        kind = get("kind", lambda x: self.word(x, ("self", "cross"), "kind"), "self")
        memory_dim = get("memory_dim", lambda x: self.positive(x, "memory_dim"))
        bias = get("bias", lambda x: self.boolean(x, "bias"), True)
        out_proj = get("out_proj", lambda x: self.boolean(x, "out_proj"), True)
        scale = get("scale", self.scale_value, "auto")
        softcap = get("softcap", self.softcap_value, "none")
        qk_norm = get("qk_norm", lambda x: self.word(x, ("none", "rmsnorm", "layernorm"),
                                                     "qk_norm"), "none")
        position = get("position", self.position_value, None)
        kernel = get("kernel", self.kernel_value, Softmax())
        mask = get("mask", self.mask, m.Full())
        sparsity = get("sparsity", self.sparsity_value, Sparsity("auto"))
        dropout = get("dropout", lambda x: self.probability(x, "dropout"), 0.0)
        if d_model is None or heads is None:
            return None

        def at(key: str) -> Span:
            return e[key].value.span if key in e else d.name_span

        if kv_heads is not None and heads % kv_heads:
            self.error(f"heads ({heads}) must be divisible by kv_heads ({kv_heads})",
                       at("kv_heads"), hint="kv_heads can be one of "
                       + ", ".join(str(i) for i in _divisors(heads)[:12]))
            failed = True
        if head_dim is None:
            if d_model % heads:
                self.error(f"d_model ({d_model}) must be divisible by heads ({heads}) when "
                           f"head_dim is not given", at("heads"),
                           hint="set `head_dim` explicitly or change `heads`")
                return None
            head_dim = d_model // heads
        value_dim = head_dim if value_dim is None else value_dim
        if kind == "self" and "memory_dim" in e:
            self.error("memory_dim applies only to cross attention", e["memory_dim"].key_span,
                       hint="remove it, or set `kind = cross`")
            failed = True
        memory_dim = memory_dim if memory_dim is not None else d_model
        if out_proj is False and heads * value_dim != d_model:
            self.error(f"without out_proj the merged heads ({heads} x {value_dim} = "
                       f"{heads * value_dim}) must equal d_model ({d_model})", at("out_proj"))
            failed = True
        scale_value = 1.0 / math.sqrt(head_dim) if scale == "auto" else scale
        if isinstance(position, Rope):
            rope_dim = position.dim if position.dim else head_dim
            if rope_dim % 2 or rope_dim > head_dim:
                span = _arg_span(e["position"].value, "dim") or at("position")
                self.error(f"rotary dim ({rope_dim}) must be even and at most head_dim "
                           f"({head_dim})", span,
                           hint="RoPE rotates pairs of features" if rope_dim % 2 else None)
                failed = True
            position = Rope(position.theta, rope_dim, position.interleaved)
        if isinstance(position, Sinusoidal) and d_model % 2:
            self.error(f"sinusoidal encodings need an even d_model, found {d_model}",
                       at("position"))
            failed = True
        if kind == "cross" and mask is not None and "segment_ids" in m.runtime_inputs(mask):
            self.error("the `document` mask needs self attention: queries and keys must come "
                       "from one sequence", at("mask"), hint="remove `document` or use kind = self")
            failed = True
        if isinstance(kernel, LinearKernel) and mask is not None:
            failed |= self.check_linear(e, mask, position, dropout, at)
        if failed:
            return None
        attn = Attention(
            name=d.name, d_model=d_model, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
            value_dim=value_dim, kind=kind, memory_dim=memory_dim, bias=bias, out_proj=out_proj,
            scale=scale_value, softcap=None if softcap == "none" else softcap,
            qk_norm=None if qk_norm == "none" else qk_norm, position=position, kernel=kernel,
            mask=mask, sparsity=sparsity, dropout=dropout)
        self.check_size(attn.parameter_count(), d.name, d.name_span)
        self.resolved_attn[d.name] = attn
        return attn

    def check_linear(self, e: dict[str, ast.Entry], mask: m.Mask, position: Position,
                     dropout: float | None, at: Callable[[str], Span]) -> bool:
        failed = False
        if mask not in (m.Full(), m.Causal("top_left")):
            self.error("a linear kernel supports only the masks `full` and `causal`", at("mask"),
                       hint="use `kernel = softmax` for other masks")
            failed = True
        if isinstance(position, (Alibi, RelativeBias)):
            self.error("score biases (alibi, relative_bias) need a softmax kernel: a linear "
                       "kernel never forms scores", at("position"))
            failed = True
        for key in ("softcap", "scale"):
            if key in e and not (isinstance(e[key].value, ast.Name)
                                 and e[key].value.id in ("none", "auto")):
                self.error(f"`{key}` has no effect with a linear kernel", e[key].key_span,
                           hint=f"remove `{key}` or use `kernel = softmax`")
                failed = True
        if dropout:
            self.error("attention dropout needs a softmax kernel (there are no attention "
                       "weights to drop)", e["dropout"].key_span)
            failed = True
        return failed

    def check_size(self, params: int, name: str, span: Span) -> None:
        size = params * 4
        if size > MAX_WEIGHT_BYTES:
            raise self.error(f"`{name}` would have {params:,} weights ({_bytes(size)} in "
                             f"float32); attndsl caps a layer at {_bytes(MAX_WEIGHT_BYTES)} "
                             "so it exports as one ONNX file", span,
                             hint="reduce d_model, heads, head_dim, ffn or layers")

    def scale_value(self, e: ast.Expr) -> float | str:
        if isinstance(e, ast.Name) and e.id == "auto":
            return "auto"
        value = self._float_value(e, "scale", "`auto` or a number")
        if not _FLOAT32_TINY <= value <= MAX_SCALE:
            raise self.error(f"scale must be a number in [{_FLOAT32_TINY:.3g}, {MAX_SCALE:g}], "
                             f"found {value:g}", e.span,
                             hint="scores are computed in float32: a larger scale overflows "
                                  "them, a smaller one is 0")
        return value

    def softcap_value(self, e: ast.Expr) -> float | str:
        if isinstance(e, ast.Name) and e.id == "none":
            return "none"
        value = self._float_value(e, "softcap", "`none` or a number")
        if not _FLOAT32_TINY <= value <= _FLOAT32_MAX:
            raise self.error(f"softcap must be a number > 0 that float32 can hold "
                             f"([{_FLOAT32_TINY:.3g}, {_FLOAT32_MAX:.3g}]), found {value:g}",
                             e.span, hint="softcap is applied to float32 scores")
        return value

    def _float_value(self, e: ast.Expr, key: str, expected: str) -> float:
        if isinstance(e, ast.Name) and e.id not in self.lets:
            raise self.error(f"{key} must be {expected}, found `{e.id}`", e.span)
        return self.number(e)

    def probability(self, e: ast.Expr, what: str) -> float:
        value = self.number(e)
        if not 0.0 <= value < 1.0:
            raise self.error(f"{what} must be in [0, 1), found {value}", e.span)
        return value

    def position_value(self, e: ast.Expr) -> Position:
        name, _ = self.callee(e, _POSITIONS, "position encoding")
        args = self.bind(e, name, _POSITIONS[name])
        if name == "none":
            return None
        if name == "sinusoidal":
            return Sinusoidal()
        if name == "alibi":
            return Alibi()
        if name == "learned":
            return Learned(self.positive(args["max_len"], "max_len"))
        if name == "rope":
            theta = self.number(args["theta"]) if "theta" in args else 10000.0
            if not 1.0 <= theta <= _FLOAT32_MAX:
                raise self.error(f"rope theta must be in [1, {_FLOAT32_MAX:.3g}], found "
                                 f"{theta:g}", args["theta"].span,
                                 hint="frequencies theta^(-2i/dim) are float32; theta < 1 makes "
                                      "them grow past what float32 angles can resolve")
            dim = self.positive(args["dim"], "rope dim") if "dim" in args else 0
            interleaved = (self.boolean(args["interleaved"], "interleaved")
                           if "interleaved" in args else False)
            return Rope(theta, dim, interleaved)
        buckets = self.positive(args["buckets"], "buckets") if "buckets" in args else 32
        max_distance = (self.positive(args["max_distance"], "max_distance")
                        if "max_distance" in args else 128)
        bidirectional = (self.boolean(args["bidirectional"], "bidirectional")
                         if "bidirectional" in args else True)
        exact = (buckets // 2 if bidirectional else buckets) // 2
        if exact < 1:
            raise self.error(f"relative_bias needs at least {4 if bidirectional else 2} buckets,"
                             f" found {buckets}", args.get("buckets", e).span)
        if max_distance <= exact:
            raise self.error(f"max_distance ({max_distance}) must exceed the exact-bucket range"
                             f" ({exact})", args.get("max_distance", e).span)
        return RelativeBias(buckets, max_distance, bidirectional)

    def kernel_value(self, e: ast.Expr) -> Softmax | LinearKernel:
        name, _ = self.callee(e, _KERNELS, "kernel")
        args = self.bind(e, name, _KERNELS[name])
        if name == "softmax":
            return Softmax()
        feature = (self.word(args["feature"], ("elu", "relu", "softmax"), "feature")
                   if "feature" in args else "elu")
        return LinearKernel(feature)

    def sparsity_value(self, e: ast.Expr) -> Sparsity:
        name, _ = self.callee(e, _SPARSITY, "sparsity")
        args = self.bind(e, name, _SPARSITY[name])
        if name == "block":
            return Sparsity("block", self.positive(args["n"], "block size"))
        return Sparsity(name)

    # -- transformer --------------------------------------------------------------------------
    def transformer(self, d: ast.TransformerDef) -> Transformer | None:
        e = self.entries(d, _TRANSFORMER_KEYS)
        failed = False
        for key in ("attention", "layers", "ffn", "norm"):
            if key not in e:
                self.error(f"transformer `{d.name}` is missing `{key}`", d.name_span,
                           hint=f"add `{key} = ...` to the block")
                failed = True
        attn = layers = ffn = norm = None
        dropout = 0.0
        try:
            if "attention" in e:
                attn = self.transformer_attention(e["attention"].value)
        except _Invalid:
            failed = True
        for key in ("layers", "ffn", "norm", "dropout"):
            if key not in e:
                continue
            try:
                value = e[key].value
                if key == "layers":
                    layers = self.positive(value, "layers")
                elif key == "ffn":
                    name, _ = self.callee(value, _FFNS, "ffn")
                    args = self.bind(value, name, (_Param("hidden", True),))
                    ffn = Ffn(name, self.positive(args["hidden"], "ffn width"))
                else:
                    if key == "norm":
                        name, _ = self.callee(value, _NORMS, "norm")
                        args = self.bind(value, name, (_Param("placement", True),))
                        norm = Norm(name, self.word(args["placement"], ("pre", "post"),
                                                    "norm placement"))
                    else:
                        dropout = self.probability(value, "dropout")
            except _Invalid:
                failed = True
        if failed or attn is None:
            return None
        tr = Transformer(name=d.name, attention=attn, layers=layers, ffn=ffn, norm=norm,
                         dropout=dropout)
        self.check_size(tr.parameter_count(), d.name, d.name_span)
        return tr

    def transformer_attention(self, e: ast.Expr) -> Attention | None:
        if not isinstance(e, ast.Name):
            raise self.error(f"expected the name of an attention, found {_describe(e)}", e.span)
        if e.id not in self.attentions:
            raise self.error(f"no attention named `{e.id}` in this file", e.span,
                             hint=self._suggest(e.id, self.attentions, "define it with "
                                                f"`attention {e.id} {{ ... }}`"))
        attn = self.attention(self.attentions[e.id])
        if attn is None:
            raise _Invalid()
        if attn.kind != "self":
            raise self.error(f"transformer stacks need self attention; `{e.id}` is cross "
                             "attention", e.span)
        return attn


# -- tables ---------------------------------------------------------------------------------

_ATTENTION_KEYS = ("d_model", "heads", "kv_heads", "head_dim", "value_dim", "kind", "memory_dim",
                   "bias", "out_proj", "scale", "softcap", "qk_norm", "position", "kernel",
                   "mask", "sparsity", "dropout")
_TRANSFORMER_KEYS = ("attention", "layers", "ffn", "norm", "dropout")
_POSITIONS = {
    "none": (), "sinusoidal": (), "alibi": (),
    "learned": (_Param("max_len", True),),
    "rope": (_Param("theta"), _Param("dim"), _Param("interleaved")),
    "relative_bias": (_Param("buckets"), _Param("max_distance"), _Param("bidirectional")),
}
_KERNELS = {"softmax": (), "linear": (_Param("feature"),)}
_SPARSITY = {"dense": (), "auto": (), "block": (_Param("n", True),)}
_FFNS = {"relu": (), "gelu": (), "gelu_tanh": (), "swiglu": ()}
_NORMS = {"layernorm": (), "rmsnorm": ()}

_MASK_PARAMS: dict[str, tuple[_Param, ...]] = {
    "full": (), "padding": (), "document": (),
    "causal": (_Param("align"),),
    "window": (_Param("left", True), _Param("right")),
    "dilated": (_Param("left", True), _Param("right"), _Param("dilation", True)),
    "chunked": (_Param("n", True),),
    "strided": (_Param("n", True),),
    "global": (_Param("first"), _Param("tokens")),
    "prefix": (_Param("n", True),),
    "random": (_Param("blocks", True), _Param("block", True), _Param("seed")),
}


def _window(c: _Checker, a: dict[str, ast.Expr], e: ast.Expr) -> m.Mask:
    left = c.non_negative(a["left"], "window left")
    right = c.non_negative(a["right"], "window right") if "right" in a else left
    return m.Window(left, right)


def _dilated(c: _Checker, a: dict[str, ast.Expr], e: ast.Expr) -> m.Mask:
    left = c.non_negative(a["left"], "dilated left")
    right = c.non_negative(a["right"], "dilated right") if "right" in a else left
    return m.Dilated(left, right, c.positive(a["dilation"], "dilation"))


def _global(c: _Checker, a: dict[str, ast.Expr], e: ast.Expr) -> m.Mask:
    if ("first" in a) == ("tokens" in a):
        raise c.error("global needs exactly one of `first = n` or `tokens = [...]`", e.span)
    if "first" in a:
        return m.Global(first=c.positive(a["first"], "global first"))
    lst = a["tokens"]
    if not isinstance(lst, ast.List) or not lst.items:
        raise c.error("global tokens must be a non-empty list of positions, like [0, 5]",
                      lst.span)
    if len(lst.items) > _MAX_LIST:
        raise c.error(f"at most {_MAX_LIST} global tokens", lst.span)
    tokens = sorted({c.non_negative(t, "token position") for t in lst.items})
    return m.Global(tokens=tuple(tokens))


def _causal(c: _Checker, a: dict[str, ast.Expr], e: ast.Expr) -> m.Mask:
    align = c.word(a["align"], ("top_left", "bottom_right"), "align") if "align" in a else (
        "top_left")
    return m.Causal(align)


_MASK_PRIMITIVES: dict[str, Callable[[_Checker, dict[str, ast.Expr], ast.Expr], m.Mask]] = {
    "full": lambda c, a, e: m.Full(),
    "padding": lambda c, a, e: m.Padding(),
    "document": lambda c, a, e: m.Document(),
    "causal": _causal,
    "window": _window,
    "dilated": _dilated,
    "chunked": lambda c, a, e: m.Chunked(c.positive(a["n"], "chunk size")),
    "strided": lambda c, a, e: m.Strided(c.positive(a["n"], "stride")),
    "global": _global,
    "prefix": lambda c, a, e: m.Prefix(c.non_negative(a["n"], "prefix length")),
    "random": lambda c, a, e: m.Random(c.random_blocks(a["blocks"]),
                                       c.positive(a["block"], "random block size"),
                                       c.non_negative(a["seed"], "seed") if "seed" in a else 0),
}


def _divisors(n: int) -> list[int]:
    small = [i for i in range(1, math.isqrt(n) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))


def _arg_span(e: ast.Expr, name: str) -> Span | None:
    if isinstance(e, ast.Call):
        for arg in e.args:
            if arg.name == name:
                return arg.value.span
    return None


def _describe(e: ast.Expr) -> str:
    match e:
        case ast.Int():
            return f"the integer {e.text}"
        case ast.Float():
            return f"the number {e.text}"
        case ast.Name():
            return f"`{e.id}`"
        case ast.Call():
            return f"a call to `{e.func}`"
        case ast.List():
            return "a list"
        case ast.BinOp(op="&" | "|") | ast.Not():
            return "a mask expression"
        case ast.Paren():
            return _describe(e.inner)
    return "an arithmetic expression"


def _one_of(choices: tuple[str, ...]) -> str:
    return ", ".join(f"`{c}`" for c in choices)


def _bytes(n: int) -> str:
    for unit, size in (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"
