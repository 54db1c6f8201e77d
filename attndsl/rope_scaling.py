"""RoPE's frequency scalings, as the checker resolves them: values of the spec that the IR's
`rope` nodes carry, so the lowering reads them without the spec."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SCALINGS", "DynamicScaling", "LinearScaling", "Llama3Scaling", "LongRopeScaling",
           "ProportionalScaling", "RopeScaling", "YarnScaling"]


@dataclass(frozen=True)
class LinearScaling:
    """Position interpolation: frequencies / factor."""

    factor: float

    def __str__(self) -> str:
        return f"linear(factor = {self.factor:g})"


@dataclass(frozen=True)
class DynamicScaling:
    """Dynamic NTK: theta grows with the sequence length beyond original_max_position."""

    factor: float
    original_max_position: int

    def __str__(self) -> str:
        return f"dynamic(factor = {self.factor:g}, original_max_position = " \
               f"{self.original_max_position})"


@dataclass(frozen=True)
class Llama3Scaling:
    """Llama 3.1: low frequencies / factor, high ones kept, a smooth ramp between."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position: int

    def __str__(self) -> str:
        return (f"llama3(factor = {self.factor:g}, low_freq_factor = {self.low_freq_factor:g}, "
                f"high_freq_factor = {self.high_freq_factor:g}, original_max_position = "
                f"{self.original_max_position})")


@dataclass(frozen=True)
class YarnScaling:
    """YaRN: a ramp between interpolated and original frequencies over the dims whose
    rotation count at original_max_position lies between beta_slow and beta_fast, and cos/sin
    scaled by attention_factor (resolved by the checker)."""

    factor: float
    original_max_position: int
    beta_fast: float
    beta_slow: float
    truncate: bool
    attention_factor: float

    def __str__(self) -> str:
        return (f"yarn(factor = {self.factor:g}, original_max_position = "
                f"{self.original_max_position}, beta_fast = {self.beta_fast:g}, beta_slow = "
                f"{self.beta_slow:g}, truncate = {str(self.truncate).lower()}, "
                f"attention_factor = {self.attention_factor!r})")


@dataclass(frozen=True)
class LongRopeScaling:
    """LongRoPE (Phi-3): per-frequency divisors, `long_factor` when the sequence is longer
    than original_max_position, else `short_factor`; cos/sin scaled by attention_factor."""

    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_max_position: int
    attention_factor: float

    def __str__(self) -> str:
        return (f"longrope(short_factor = [{', '.join(f'{v!r}' for v in self.short_factor)}], "
                f"long_factor = [{', '.join(f'{v!r}' for v in self.long_factor)}], "
                f"original_max_position = {self.original_max_position}, attention_factor = "
                f"{self.attention_factor!r})")


@dataclass(frozen=True)
class ProportionalScaling:
    """Proportional RoPE (Gemma 4's, LFM3's): the first `rotated` pairs turn at their
    frequencies / factor, the others not at all."""

    rotated: int
    factor: float

    def __str__(self) -> str:
        return f"proportional(rotated = {self.rotated}, factor = {self.factor:g})"


RopeScaling = (LinearScaling | DynamicScaling | Llama3Scaling | YarnScaling | LongRopeScaling
               | ProportionalScaling)
# every scaling class (the IR's literals and attribute kinds read them from here)
SCALINGS = (LinearScaling, DynamicScaling, Llama3Scaling, YarnScaling, LongRopeScaling,
            ProportionalScaling)
