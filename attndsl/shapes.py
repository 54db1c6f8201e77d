"""The type of an IR value: its element type and its axes, each a static size or a symbol
(`B`, `L`, `S`, `P + L`, ...). Rendered as the IR text writes it: `[B, L, 512]` (the model's
float type), `float[B, S, 384]`, `int64[B]`, `bool[B, L, L]`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_LENGTH", "T", "TensorType"]

# The longest sequence (queries or keys) an exported model is built for: torch.export's
# dynamic length bound, and the planner's horizon (a band wider than this is no band). Here,
# below the masks and the spec, which both read it.
MAX_LENGTH = 1 << 20


@dataclass(frozen=True)
class TensorType:
    dims: tuple[int | str, ...]
    dtype: str | None = None  # None: the model's float type; else float | int64 | bool

    def __str__(self) -> str:
        return f"{self.dtype or ''}[{', '.join(map(str, self.dims))}]"

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def last(self) -> int:
        """The last axis, always static in attndsl's graphs (a feature width)."""
        width = self.dims[-1]
        assert isinstance(width, int), self
        return width

    @property
    def is_float(self) -> bool:
        return self.dtype in (None, "float")


def T(*dims: int | str, dtype: str | None = None) -> TensorType:
    """TensorType((dims...), dtype): `T("B", "L", 512)`."""
    return TensorType(tuple(dims), dtype)
