"""The position encodings of the resolved spec (docs/LANGUAGE.md, Position encodings): the
values of an attention's `position`, re-exported by `spec`."""

from __future__ import annotations

from dataclasses import dataclass

from .rope_scaling import RopeScaling

__all__ = ["Alibi", "Learned", "Position", "Relative2D", "RelativeBias", "RelativeLogits",
           "Rope", "ScoreBias", "Sinusoidal"]


@dataclass(frozen=True)
class Sinusoidal:
    """The sinusoidal table, docs/LANGUAGE.md: `layout` interleaved (sin, cos of each frequency
    side by side) or halves (every sine, then every cosine: CTRL, XGLM); position p reads the
    angle (p + offset) * f_i (XGLM's offset 2); `frequencies` vaswani (f_i = 10000^(-2i/d)) or
    tensor2tensor (f_i = 10000^(-i/(d/2 - 1)), XGLM's)."""

    layout: str = "interleaved"
    offset: int = 0
    frequencies: str = "vaswani"


@dataclass(frozen=True)
class Learned:
    max_len: int


@dataclass(frozen=True)
class Rope:
    theta: float
    dim: int  # rotated features: the first `dim` of each head (even, <= head_dim)
    interleaved: bool  # GPT-J pairs (2i, 2i+1) instead of rotate-half halves
    scaling: RopeScaling | None = None
    # multimodal RoPE: the frequencies of the time, height and width position streams (an
    # input position_ids [3, B, L]), sectioned or interleaved (docs/LANGUAGE.md)
    mrope: tuple[int, int, int] | None = None
    mrope_interleaved: bool = False
    # axial 2-D RoPE (Pixtral's): a token's row and column (position_ids [2, B, L]) turn the
    # first and second halves of its frequencies (docs/LANGUAGE.md)
    axial: bool = False

    @property
    def streams(self) -> int:
        """The position streams it reads (position_ids [n, B, L]): 3, 2, or 0 (positions)."""
        return 3 if self.mrope is not None else 2 if self.axial else 0

    def attrs(self, dim: int | None = None) -> dict:
        """The attributes of a `rope` IR node rotating `dim` features (default: its own)."""
        out = dict(theta=self.theta, dim=self.dim if dim is None else dim,
                   interleaved=self.interleaved, scaling=self.scaling)
        if self.mrope is not None:
            out.update(mrope=self.mrope, mrope_interleaved=self.mrope_interleaved)
        if self.axial:
            out.update(axial=True)
        return out


class ScoreBias:
    """A position encoding that adds a bias to the scores (ALiBi, T5, relative logits)."""


@dataclass(frozen=True)
class Alibi(ScoreBias):
    """-slope_h * |q - k| added to the scores; slopes by Press et al.'s schedule or the plain
    geometric one, from 2^(-max_bias / H); `scaled` adds the bias before the score scale
    (Falcon) instead of after it (BLOOM, MPT)."""

    slopes: str = "press"  # press | geometric
    max_bias: float = 8.0
    scaled: bool = False
    # float32, or bfloat16: slope and position rounded to bfloat16, and their product (the
    # arithmetic Falcon-RW was trained with)
    rounding: str = "float32"


@dataclass(frozen=True)
class RelativeBias(ScoreBias):
    buckets: int
    max_distance: int
    bidirectional: bool


@dataclass(frozen=True)
class Relative2D(ScoreBias):
    """BEiT's 2-D relative position bias (docs/LANGUAGE.md): a table of (2w - 1)^2 offsets
    (dr, dc) between two tokens' rows and columns in a w x w window, and with `class_token`
    three more rows (the class token to a patch, a patch to it, it to itself), per head;
    bilinearly resized to the image's grid; the rows and columns read as position_ids
    [2, B, L]."""

    window: int
    class_token: bool = True
    streams = 2

    @property
    def table_rows(self) -> int:
        return (2 * self.window - 1) ** 2 + (3 if self.class_token else 0)


@dataclass(frozen=True)
class RelativeLogits(ScoreBias):
    """Inkling's: query i's relative states r_h = (x_i W_r^T)_h mix a bank P [d_rel, extent]
    of profiles by distance, b = r_h . P[:, i - j] for 0 <= i - j < extent, else 0."""

    d_rel: int = 16
    extent: int = 1024


Position = Sinusoidal | Learned | Rope | Alibi | RelativeBias | RelativeLogits | None
