"""The resolved spec: what the checker produces and every later stage consumes. Every default
is filled in and every name resolved, so backends never look anything up or guess."""

from __future__ import annotations

from dataclasses import dataclass, field

from .masks import Mask, runtime_inputs
from .source import Source

__all__ = [
    "MAX_LENGTH", "Alibi", "Attention", "Ffn", "Layer", "Learned", "LinearKernel", "Norm",
    "Position", "Program", "RelativeBias", "Rope", "Sinusoidal", "Softmax", "Sparsity",
    "Transformer", "input_names",
]


# The longest sequence (queries or keys) an exported model is built for: torch.export's
# dynamic length bound, and the planner's horizon (a band wider than this is no band).
MAX_LENGTH = 1 << 20


@dataclass(frozen=True)
class Sinusoidal:
    pass


@dataclass(frozen=True)
class Learned:
    max_len: int


@dataclass(frozen=True)
class Rope:
    theta: float
    dim: int  # rotated features: the first `dim` of each head (even, <= head_dim)
    interleaved: bool  # GPT-J pairs (2i, 2i+1) instead of rotate-half halves


@dataclass(frozen=True)
class Alibi:
    pass


@dataclass(frozen=True)
class RelativeBias:
    buckets: int
    max_distance: int
    bidirectional: bool


Position = Sinusoidal | Learned | Rope | Alibi | RelativeBias | None


@dataclass(frozen=True)
class Softmax:
    pass


@dataclass(frozen=True)
class LinearKernel:
    feature: str  # elu | relu | softmax


@dataclass(frozen=True)
class Sparsity:
    mode: str  # dense | block | auto
    block: int | None = None

    def __str__(self) -> str:
        return f"block({self.block})" if self.mode == "block" else self.mode


@dataclass(frozen=True)
class Attention:
    name: str
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    value_dim: int
    kind: str  # self | cross
    memory_dim: int  # width of keys/values' input: d_model for self attention
    bias: bool
    out_proj: bool
    scale: float
    softcap: float | None
    qk_norm: str | None  # rmsnorm | layernorm
    position: Position
    kernel: Softmax | LinearKernel
    mask: Mask
    sparsity: Sparsity
    dropout: float

    @property
    def groups(self) -> int:
        """Query heads per kv head: query head h reads kv head h // groups."""
        return self.heads // self.kv_heads

    @property
    def runtime_inputs(self) -> tuple[str, ...]:
        return runtime_inputs(self.mask)


@dataclass(frozen=True)
class Ffn:
    kind: str  # relu | gelu | gelu_tanh | swiglu
    hidden: int


@dataclass(frozen=True)
class Norm:
    kind: str  # layernorm | rmsnorm
    placement: str  # pre | post

    @property
    def eps(self) -> float:
        return 1e-5 if self.kind == "layernorm" else 1e-6


@dataclass(frozen=True)
class Transformer:
    name: str
    attention: Attention
    layers: int
    ffn: Ffn
    norm: Norm
    dropout: float

    @property
    def d_model(self) -> int:
        return self.attention.d_model

    @property
    def runtime_inputs(self) -> tuple[str, ...]:
        return self.attention.runtime_inputs


Layer = Attention | Transformer


def input_names(spec: Layer) -> tuple[str, ...]:
    """Graph inputs, in this order: x, memory (cross), key_lengths, segment_ids."""
    attn = spec.attention if isinstance(spec, Transformer) else spec
    return ("x", *(["memory"] if attn.kind == "cross" else []), *attn.runtime_inputs)


@dataclass(frozen=True)
class Program:
    """A checked file: its layers by name, in source order, and the source they came from."""

    source: Source
    layers: dict[str, Layer] = field(default_factory=dict)
