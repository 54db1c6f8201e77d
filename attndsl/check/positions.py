"""Position encodings: `position = ...` and RoPE's scalings, with their parameter checks."""

from __future__ import annotations

import math

from .. import ast
from ..position_spec import Relative2D
from ..rope_scaling import ProportionalScaling
from ..spec import (
    MAX_LENGTH,
    Alibi,
    DynamicScaling,
    Learned,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    Position,
    RelativeBias,
    RelativeLogits,
    Rope,
    RopeScaling,
    Sinusoidal,
    YarnScaling,
)
from .norms import Norms
from .values import FLOAT32_MAX, Param

__all__ = ["Positions", "check_rope_dim"]

MAX_FACTOR = 1e6


class Positions(Norms):
    def sinusoidal_value(self, args: dict) -> Sinusoidal:
        """`sinusoidal(layout = interleaved, offset = 0, frequencies = vaswani)`."""
        layout = self.word(args["layout"], SINUSOIDAL_LAYOUTS, "sinusoidal layout") \
            if "layout" in args else "interleaved"
        frequencies = self.word(args["frequencies"], SINUSOIDAL_FREQUENCIES,
                                "sinusoidal frequencies") if "frequencies" in args else "vaswani"
        offset = 0
        if "offset" in args:
            offset = self.integer(args["offset"])
            if offset > MAX_OFFSET:
                raise self.error(f"offset must be in [0, {MAX_OFFSET}], found {offset}",
                                 args["offset"].span, hint="XGLM's is 2 (fairseq's padding rows)")
        return Sinusoidal(layout, offset, frequencies)

    def position_value(self, e: ast.Expr) -> Position:
        name, _ = self.callee(e, _POSITIONS, "position encoding")
        args = self.bind(e, name, _POSITIONS[name])
        if name == "none":
            return None
        if name == "sinusoidal":
            return self.sinusoidal_value(args)
        if name == "alibi":
            slopes = self.word(args["slopes"], ("press", "geometric"),
                               "alibi slopes") if "slopes" in args else "press"
            max_bias = 8.0
            if "max_bias" in args:
                max_bias = self.number(args["max_bias"])
                if not 0 < max_bias <= 1024:
                    raise self.error(f"max_bias must be in (0, 1024], found {max_bias:g}",
                                     args["max_bias"].span, hint="ALiBi papers use 8")
            scaled = self.boolean(args["scaled"], "scaled") if "scaled" in args else False
            rounding = self.word(args["rounding"], ("float32", "bfloat16"),
                                 "alibi rounding") if "rounding" in args else "float32"
            return Alibi(slopes, max_bias, scaled, rounding)
        if name == "learned":
            return Learned(self.positive(args["max_len"], "max_len"))
        if name == "rope":
            return self.rope_value(args)
        if name == "relative_2d":  # BEiT's
            window = self.positive(args["window"], "window")
            if window > 1024:
                raise self.error(f"window must be in [1, 1024] patches a side, found {window}",
                                 args["window"].span)
            return Relative2D(window, self.boolean(args["class_token"], "class_token")
                              if "class_token" in args else True)
        if name == "relative_logits":
            d_rel = self.positive(args["d_rel"], "d_rel") if "d_rel" in args else 16
            extent = self.positive(args["extent"], "extent") if "extent" in args else 1024
            for key, value, most in (("d_rel", d_rel, 4096), ("extent", extent, MAX_LENGTH)):
                if value > most:
                    raise self.error(f"{key} must be in [1, {most}], found {value}",
                                     args[key].span)
            return RelativeLogits(d_rel, extent)
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

    def rope_value(self, args: dict[str, ast.Expr]) -> Rope:
        theta = self.number(args["theta"]) if "theta" in args else 10000.0
        if not 1.0 <= theta <= FLOAT32_MAX:
            raise self.error(f"rope theta must be in [1, {FLOAT32_MAX:.3g}], found "
                             f"{theta:g}", args["theta"].span,
                             hint="frequencies theta^(-2i/dim) are float32; theta < 1 makes "
                                  "them grow past what float32 angles can resolve")
        dim = self.positive(args["dim"], "rope dim") if "dim" in args else 0
        interleaved = (self.boolean(args["interleaved"], "interleaved")
                       if "interleaved" in args else False)
        scaling = None
        if "scaling" in args and not (isinstance(args["scaling"], ast.Name)
                                      and args["scaling"].id == "none"):
            scaling = self.scaling_value(args["scaling"])
        mrope = self.mrope_sections(args["mrope"]) if "mrope" in args else None
        mrope_interleaved = False
        if "mrope_interleaved" in args:
            mrope_interleaved = self.boolean(args["mrope_interleaved"], "mrope_interleaved")
            if mrope is None:
                raise self.error("mrope_interleaved needs `mrope = [t, h, w]`",
                                 args["mrope_interleaved"].span,
                                 hint="multimodal RoPE's sections say which frequencies read "
                                      "each position stream")
        axial = self.boolean(args["axial"], "axial") if "axial" in args else False
        if axial and (mrope is not None or scaling is not None):
            raise self.error(f"axial 2-D RoPE takes no {'mrope' if mrope else 'scaling'}",
                             args["axial"].span, hint="a token's row and column turn its "
                                                      "frequencies as they are")
        return Rope(theta, dim, interleaved, scaling, mrope, mrope_interleaved, axial)

    def mrope_sections(self, e: ast.Expr) -> tuple[int, int, int]:
        """`mrope = [t, h, w]`: three non-negative frequency counts."""
        if not isinstance(e, ast.List) or len(e.items) != 3:
            raise self.error("mrope takes three frequency counts, [t, h, w]", e.span,
                             hint="the time, height and width streams' sections "
                                  "(Qwen2.5-VL: [16, 24, 24]; Qwen3.5: [11, 11, 10])")
        values = []
        for item in e.items:
            value = self.integer(item)
            if value < 0:
                raise self.error(f"an mrope section must be >= 0, found {value}", item.span)
            values.append(value)
        return values[0], values[1], values[2]

    def check_mrope(self, rope: Rope, kind: str, span, readers: dict) -> bool:
        """Multimodal RoPE against its layer: the sectioned layout splits exactly the dim / 2
        frequencies, its position streams are the queries' own (self attention), and no
        mechanism of the layer reads one position per token (`readers`: key -> span)."""
        if rope.axial:
            return self.check_axial(rope, kind, span, readers)
        if rope.mrope is None:
            return False
        for key, where in readers.items():
            self.error(f"`{key}` reads one position per token, and multimodal RoPE gives each "
                       "token three (time, height, width)", where,
                       hint=f"remove `{key}` or `mrope`")
            return True
        if kind == "cross":
            self.error("multimodal RoPE (mrope) needs self attention: its position streams are "
                       "the tokens' own, and a memory row has none", span,
                       hint="remove `mrope`, or use kind = self")
            return True
        if not rope.mrope_interleaved and sum(rope.mrope) != rope.dim // 2:
            self.error(f"the sectioned mrope {list(rope.mrope)} covers {sum(rope.mrope)} "
                       f"frequencies; rope dim {rope.dim} has {rope.dim // 2}", span,
                       hint="t + h + w must equal dim / 2 (or set mrope_interleaved = true, "
                            "whose sections may be cut by dim / 2)")
            return True
        return False

    def check_axial(self, rope: Rope, kind: str, span, readers: dict) -> bool:
        """Axial 2-D RoPE: self attention, a rotary dim of a multiple of 4 (half its
        frequencies each for the rows and the columns), no mechanism of one position."""
        why = next((f"`{key}` reads one position per token, and 2-D RoPE gives each two"
                    for key in readers), None)
        if kind == "cross":
            why = "axial 2-D RoPE needs self attention: a memory row has no place in the grid"
        elif rope.dim % 4:
            why = f"axial 2-D RoPE needs a rotary dim that 4 divides, found {rope.dim}"
        if why is not None:
            self.error(why, span, hint="rows and columns each turn a quarter of the rotated "
                                       "features' pairs")
        return why is not None

    def scaling_value(self, e: ast.Expr) -> RopeScaling:
        name, _ = self.callee(e, _SCALINGS, "RoPE scaling")
        args = self.bind(e, name, _SCALINGS[name])

        def factor(key: str = "factor") -> float:
            value = self.number(args[key])
            if not 0 < value <= MAX_FACTOR:
                raise self.error(f"{key} must be in (0, {MAX_FACTOR:g}], found {value:g}",
                                 args[key].span)
            return value

        def original() -> int:
            return self.positive(args["original_max_position"], "original_max_position")

        if name == "linear":
            return LinearScaling(factor())
        if name == "dynamic":
            return DynamicScaling(factor(), original())
        if name == "llama3":
            low, high = factor("low_freq_factor"), factor("high_freq_factor")
            if low >= high:
                raise self.error(f"low_freq_factor ({low:g}) must be below high_freq_factor "
                                 f"({high:g})", args["low_freq_factor"].span,
                                 hint="Llama 3.1 uses low_freq_factor = 1, high_freq_factor = 4")
            return Llama3Scaling(factor(), low, high, original())
        if name == "yarn":
            f = factor()
            beta_fast = self.number(args["beta_fast"]) if "beta_fast" in args else 32.0
            beta_slow = self.number(args["beta_slow"]) if "beta_slow" in args else 1.0
            for key, beta in (("beta_fast", beta_fast), ("beta_slow", beta_slow)):
                if not 0 < beta <= MAX_FACTOR:
                    raise self.error(f"{key} must be in (0, {MAX_FACTOR:g}], found {beta:g}",
                                     args[key].span)
            truncate = self.boolean(args["truncate"], "truncate") if "truncate" in args else True
            mscale = self.number(args["mscale"]) if "mscale" in args else 0.0
            mscale_all = self.number(args["mscale_all_dim"]) if "mscale_all_dim" in args else 0.0
            if "attention_factor" in args and not _is_auto(args["attention_factor"]):
                attention = factor("attention_factor")
            elif mscale and mscale_all:
                attention = _yarn_mscale(f, mscale) / _yarn_mscale(f, mscale_all)
            else:
                attention = _yarn_mscale(f, 1.0)
            return YarnScaling(f, original(), beta_fast, beta_slow, truncate, attention)
        if name == "proportional":
            return ProportionalScaling(self.positive(args["rotated"], "rotated"),
                                       factor() if "factor" in args else 1.0)
        short, long = self.factor_list(args["short_factor"]), self.factor_list(args["long_factor"])
        orig = original()
        if "attention_factor" in args and not _is_auto(args["attention_factor"]):
            attention = factor("attention_factor")
        elif "factor" in args:
            f = factor()
            attention = 1.0 if f <= 1 else math.sqrt(1 + math.log(f) / math.log(orig))
        else:
            raise self.error("longrope needs `factor` (or `attention_factor`)", e.span,
                             hint="factor = max_position_embeddings / "
                                  "original_max_position_embeddings (Phi-3: 131072 / 4096)")
        return LongRopeScaling(short, long, orig, attention)

    def factor_list(self, e: ast.Expr) -> tuple[float, ...]:
        if not isinstance(e, ast.List) or not e.items:
            raise self.error("expected a list of numbers, one per rotated pair", e.span,
                             hint="write `[1.0, 1.02, ...]` with rope dim / 2 entries")
        values = []
        for item in e.items:
            value = self.number(item)
            if not 0 < value <= MAX_FACTOR:
                raise self.error(f"a frequency factor must be in (0, {MAX_FACTOR:g}], found "
                                 f"{value:g}", item.span)
            values.append(value)
        return tuple(values)


def check_rope_dim(rope: Rope) -> str | None:
    """What is wrong with a resolved RoPE's scaling for its rotary dim, if anything."""
    s = rope.scaling
    if isinstance(s, LongRopeScaling):
        for name, values in (("short_factor", s.short_factor), ("long_factor", s.long_factor)):
            if len(values) != rope.dim // 2:
                return (f"longrope {name} has {len(values)} entries; rope dim {rope.dim} needs "
                        f"{rope.dim // 2} (one per rotated pair)")
    if isinstance(s, ProportionalScaling) and s.rotated > rope.dim // 2:
        return (f"proportional rotates {s.rotated} pairs; rope dim {rope.dim} has "
                f"{rope.dim // 2}")
    if isinstance(s, DynamicScaling) and rope.dim <= 2:
        return "dynamic scaling needs a rope dim above 2 (its exponent is dim / (dim - 2))"
    return None


def _yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


SINUSOIDAL_LAYOUTS = ("interleaved", "halves")
SINUSOIDAL_FREQUENCIES = ("vaswani", "tensor2tensor")
MAX_OFFSET = 1 << 20


def _is_auto(e: ast.Expr) -> bool:
    return isinstance(e, ast.Name) and e.id == "auto"


_POSITIONS = {
    "none": (), "sinusoidal": (Param("layout"), Param("offset"), Param("frequencies")),
    "alibi": (Param("slopes"), Param("max_bias"), Param("scaled"), Param("rounding")),
    "learned": (Param("max_len", True),),
    "rope": (Param("theta"), Param("dim"), Param("interleaved"), Param("scaling"),
             Param("mrope"), Param("mrope_interleaved"), Param("axial")),
    "relative_bias": (Param("buckets"), Param("max_distance"), Param("bidirectional")),
    "relative_logits": (Param("d_rel"), Param("extent")),
    "relative_2d": (Param("window", True), Param("class_token")),
}
_SCALINGS = {
    "linear": (Param("factor", True),),
    "dynamic": (Param("factor", True), Param("original_max_position", True)),
    "llama3": (Param("factor", True), Param("low_freq_factor", True),
               Param("high_freq_factor", True), Param("original_max_position", True)),
    "yarn": (Param("factor", True), Param("original_max_position", True), Param("beta_fast"),
             Param("beta_slow"), Param("mscale"), Param("mscale_all_dim"),
             Param("attention_factor"), Param("truncate")),
    "longrope": (Param("short_factor", True), Param("long_factor", True),
                 Param("original_max_position", True), Param("factor"),
                 Param("attention_factor")),
    "proportional": (Param("rotated", True), Param("factor")),
}
