"""Attention definitions: their keys, defaults and the checks between keys; norms."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from .. import ast
from .. import masks as m
from ..mechanisms import MECHANISMS, SELECTORS, ProjectionWhere, projection_of
from ..mechanisms import PROJECTIONS as FORMS  # (PROJECTIONS here: q, k, v, o)
from ..position_spec import Relative2D
from ..source import Span
from ..spec import (
    Alibi,
    Attention,
    RelativeLogits,
    Rope,
    Sinusoidal,
    Softmax,
    Sparsity,
)
from ..weight_table import parameter_count
from .kernels import arg_span
from .mechanisms import Mechanisms
from .positions import check_rope_dim
from .values import FLOAT32_TINY, Entries, Param, describe

__all__ = ["MAX_SCALE", "MAX_WEIGHT_BYTES", "PROJECTIONS", "Layers"]

# float32 weights of one layer: exports over 2 GiB write external data, and compile holds
# about three copies at its peak, so a larger layer is a typo rather than a model to build here
MAX_WEIGHT_BYTES = 1024**4
MAX_SCALE = 1e6  # beyond, float32 scores overflow for ordinary inputs


class Layers(Mechanisms):
    attentions: dict[str, ast.AttentionDef]
    resolved_attn: dict[str, Attention | None]

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
        get = Entries(self, e, "attention", d)
        get.require("d_model", "heads")
        d_model = get("d_model", lambda x: self.positive(x, "d_model"))
        heads = get("heads", lambda x: self.positive(x, "heads"))
        kv_heads = get("kv_heads", lambda x: self.positive(x, "kv_heads"), heads)
        head_dim = get("head_dim", lambda x: self.positive(x, "head_dim"))
        value_dim = get("value_dim", lambda x: self.positive(x, "value_dim"))
        kind = get("kind", lambda x: self.word(x, ("self", "cross"), "kind"), "self")
        memory_dim = get("memory_dim", lambda x: self.positive(x, "memory_dim"))
        bias = get("bias", self.bias_value, PROJECTIONS)
        out_proj = get("out_proj", lambda x: self.boolean(x, "out_proj"), True)
        out_dim = get("out_dim", lambda x: self.positive(x, "out_dim"))
        scale = get("scale", self.scale_value, "auto")
        position = get("position", self.position_value, None)
        kernel = get("kernel", self.kernel_value, Softmax())
        mask = get("mask", self.mask, m.Full())
        sparsity = get("sparsity", self.sparsity_value, Sparsity("auto"))
        dropout = get("dropout", lambda x: self.probability(x, "dropout"), 0.0)
        hooked = self.mechanism_values(get)
        # a projection form's value (`mechanisms.PROJECTIONS`), where one is set
        projection = next((value for value in [
            get(key, lambda x, form=form: form.read(self, x), None)
            for key, form in FORMS.items()] if value is not None), None)
        failed = get.failed
        forms = sorted((key for key in FORMS if key in e), key=lambda k: e[k].key_span.start)
        if len(forms) > 1:  # each replaces the projections: one at most
            self.error(f"`{forms[0]}` and `{forms[1]}` each replace the attention's "
                       "projections: an attention takes one of them", e[forms[1]].key_span,
                       hint=f"remove `{forms[1]}` or `{forms[0]}`")
            failed = True
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
        if bias is not None and "o" in bias and out_proj is False:
            if "bias" in e and isinstance(e["bias"].value, ast.List):
                self.error("`o` has no bias without out_proj", at("bias"),
                           hint="remove `o` from the list, or set `out_proj = true`")
                failed = True
            bias = tuple(p for p in bias if p != "o")
        if out_proj is False and heads * value_dim != d_model:
            self.error(f"without out_proj the merged heads ({heads} x {value_dim} = "
                       f"{heads * value_dim}) must equal d_model ({d_model})", at("out_proj"))
            failed = True
        if out_dim is not None and out_dim != d_model:
            failed |= self.check_out_dim(e, out_proj, kernel, projection, hooked, at)
        scale_value = 1.0 / math.sqrt(head_dim) if scale == "auto" else scale
        if isinstance(position, Rope):
            rope_dim = position.dim or (projection_of(projection).rotated(projection)
                                        if projection is not None else None) or head_dim
            if rope_dim % 2 or rope_dim > head_dim:
                span = arg_span(e["position"].value, "dim") or at("position")
                self.error(f"rotary dim ({rope_dim}) must be even and at most head_dim "
                           f"({head_dim})", span,
                           hint="RoPE rotates pairs of features" if rope_dim % 2 else None)
                failed = True
            position = replace(position, dim=rope_dim)
            problem = check_rope_dim(position)
            if problem and rope_dim % 2 == 0 and rope_dim <= head_dim:
                self.error(problem, arg_span(e["position"].value, "scaling") or at("position"))
                failed = True
            failed |= self.check_mrope(position, kind, arg_span(e["position"].value, "mrope")
                                       or arg_span(e["position"].value, "axial")
                                       or at("position"), {key: at(key) for key, _ in hooked
                                                           if MECHANISMS[key].reads_positions})
        if isinstance(position, Sinusoidal) and d_model % 2:
            self.error(f"sinusoidal encodings need an even d_model, found {d_model}",
                       at("position"))
            failed = True
        elif isinstance(position, Sinusoidal) and position.frequencies == "tensor2tensor" \
                and d_model < 4:
            self.error(f"tensor2tensor's frequencies 10000^(-i / (d_model/2 - 1)) need "
                       f"d_model >= 4, found {d_model}", at("position"))
            failed = True
        if kind == "cross" and mask is not None and m.reads_documents(mask):
            self.error("positions within documents (`qd`, `kd`) need self attention: queries "
                       "and keys must come from one sequence", at("mask"),
                       hint="remove them or use kind = self; cross attention's `document` "
                            "reads memory_segment_ids")
            failed = True
        if isinstance(position, Alibi) and position.rounding == "bfloat16" and mask is not None \
                and m.Padding("left") in m.primitives(mask):
            self.error("alibi(rounding = bfloat16) rounds each token's index, which with left "
                       "padding is not its position among the real tokens (transformers' "
                       "Falcon counts those)", at("position"),
                       hint="pad on the right (`padding`), or use rounding = float32, whose "
                            "bias depends on distances alone")
            failed = True
        readers = [key for key, _ in hooked if MECHANISMS[key].reads_positions]
        if isinstance(position, Relative2D) and readers:
            self.error(f"`{readers[0]}` reads one position per token, and relative_2d gives "
                       "each two (its row and column)", at(readers[0]),
                       hint=f"remove `{readers[0]}` or relative_2d")
            failed = True
        if isinstance(position, Relative2D) and (kind == "cross" or projection is not None):
            self.error("relative_2d reads each token's row and column in an image's grid: " + (
                "cross attention's keys are memory rows" if kind == "cross" else
                "a projection form makes its own heads"), at("position"),
                hint="use relative_2d in self attention with q_proj, k_proj and v_proj")
            failed = True
        if isinstance(position, RelativeLogits) and (kind == "cross" or projection is not None):
            self.error("relative_logits reads each query token's own relative states over the "
                       "keys before it in its sequence: " + (
                           "cross attention's keys are memory rows" if kind == "cross" else
                           "a projection form makes its own heads"), at("position"),
                       hint="use relative_logits in self attention with q_proj, k_proj and "
                            "v_proj")
            failed = True
        failed |= self.check_mechanisms(e, kernel, heads, kv_heads, at, hooked)
        if projection is not None:
            failed |= projection_of(projection).conflicts(self, projection, ProjectionWhere(
                e, kind, kernel, heads, kv_heads, head_dim, position, at, out_proj))
        problem, kernel = self.check_kernel(e, kernel, kind, heads, kv_heads, head_dim, bias,
                                            mask, position, dropout, at)
        failed |= problem
        if failed:
            return None
        attn = Attention(
            name=d.name, d_model=d_model, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
            value_dim=value_dim, kind=kind, memory_dim=memory_dim, bias=bias, out_proj=out_proj,
            scale=scale_value,
            position=position, kernel=kernel,
            mask=mask, sparsity=sparsity, dropout=dropout,
            mechanisms=hooked, projection=projection,
            out_dim=0 if out_dim in (None, d_model) else out_dim,
            spans=tuple((key, at(key)) for key in ("kind", "mask", "position", "kernel",
                                                   *SELECTORS)))
        for key in (key for key in SELECTORS if key in e):  # the core chosen among variants
            variants = SELECTORS[key].read(self, d, e[key].value)
            if variants is None:
                return None
            attn = replace(attn, variants=variants)
        self.check_size(parameter_count(attn), d.name, d.name_span)
        self.resolved_attn[d.name] = attn
        return attn

    def check_out_dim(self, e: dict, out_proj: bool, kernel: object, projection: object,
                      hooked: tuple, at: Callable[[str], Span]) -> bool:
        """`out_dim` other than d_model: o_proj writes it, so the attention needs o_proj, a
        softmax core of its own q, k and v projections and no mechanism on o_proj's output;
        True if an error was reported."""
        after = [key for key, _ in hooked if "output" in (MECHANISMS[key].hook,
                                                          *MECHANISMS[key].also)]
        problem = ("out_dim is o_proj's width: it needs `out_proj = true`" if out_proj is False
                   else "out_dim needs a softmax attention with its own q, k and v projections "
                   "(no kernel or projection form)" if not isinstance(kernel, Softmax)
                   or projection is not None
                   else f"out_dim changes o_proj's width, which `{after[0]}` reads"
                   if after else None)
        if problem:
            self.error(problem, at("out_dim"), hint="remove `out_dim` (o_proj then writes "
                                                    "d_model)")
        return problem is not None

    def bias_value(self, e: ast.Expr) -> tuple[str, ...]:
        """`true` (every projection), `false`, or a list of projections: `[q, k, v]`."""
        if not isinstance(e, ast.List):
            if not (isinstance(e, ast.Name) and e.id in ("true", "false")):
                found = f"`{e.id}`" if isinstance(e, ast.Name) else describe(e)
                raise self.error(f"bias must be `true`, `false` or a list of projections; found "
                                 f"{found}", e.span, hint="for example `bias = [q, k, v]`")
            return PROJECTIONS if e.id == "true" else ()
        return self.word_list(e, PROJECTIONS, "a biased projection")

    def check_size(self, params: int, name: str, span: Span) -> None:
        size = params * 4
        if size > MAX_WEIGHT_BYTES:
            raise self.error(f"`{name}` would have {params:,} weights ({_bytes(size)} in "
                             f"float32); attndsl caps a layer at {_bytes(MAX_WEIGHT_BYTES)} "
                             "(compile holds about three copies in memory)", span,
                             hint="reduce d_model, heads, head_dim, ffn or layers")

    def scale_value(self, e: ast.Expr) -> float | str:
        return self.word_or_number(
            e, "scale", "auto", FLOAT32_TINY, MAX_SCALE,
            f"scale must be a number in [{FLOAT32_TINY:.3g}, {MAX_SCALE:g}], found {{:g}}",
            "scores are computed in float32: a larger scale overflows them, a smaller one is 0")

    def word_or_number(self, e: ast.Expr, key: str, word: str, lo: float, hi: float,
                        message: str, hint: str) -> float | str:
        """`word`, or a number in [lo, hi] (`message` formats the number found)."""
        if isinstance(e, ast.Name) and e.id == word:
            return word
        value = self._float_value(e, key, f"`{word}` or a number")
        if not lo <= value <= hi:
            raise self.error(message.format(value), e.span, hint=hint)
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

    def sparsity_value(self, e: ast.Expr) -> Sparsity:
        name, _ = self.callee(e, _SPARSITY, "sparsity")
        args = self.bind(e, name, _SPARSITY[name])
        if name == "block":
            return Sparsity("block", self.positive(args["n"], "block size"))
        return Sparsity(name)


# -- tables ---------------------------------------------------------------------------------

_ATTENTION_KEYS = ("d_model", "heads", "kv_heads", "head_dim", "value_dim", "kind", "memory_dim",
                   "bias", "out_proj", "out_dim", "scale", "position", "kernel",
                   "mask", "sparsity", "dropout", *FORMS,
                   *SELECTORS, *MECHANISMS)
_SPARSITY = {"dense": (), "auto": (), "block": (Param("n", True),)}
PROJECTIONS = ("q", "k", "v", "o")


def _divisors(n: int) -> list[int]:
    """n's divisors, those of up to 10**5 and their cofactors (a hint's list: a count of
    10**18 must not take a billion steps)."""
    small = [i for i in range(1, min(math.isqrt(n), 10**5) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))


def _bytes(n: int) -> str:
    for unit, size in (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"
