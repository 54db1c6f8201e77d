"""What a projection form is: one module that carries every facet of an attention whose queries,
keys and values come from projections of its own in place of q_proj, k_proj and v_proj, with the
attention core left as it is (`key = name(...)`): its value and checks, its weights, its nodes
in one pass and when decoding, its cache layout, and what a genai export and quantization must
know of it.

The spec holds its value in `Attention.projection`. When decoding it may cache something
other than every head's keys and values (`cache`): its `decoding` nodes then attend over
that cache, and `merged` maps the core's output back to the merged heads. Quantization needs
no facet: a weight its nodes read through `linear` is stored in blocks as any projection's, one
another op reads (a decoding form's `head_linear`) stays float (`planner.rewrites.quantized`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Projection", "ProjectionWhere"]


@dataclass(frozen=True)
class ProjectionWhere:
    """What a projection form's `conflicts` may read of the attention being checked: its
    entries (key -> ast.Entry), kind, kernel, heads, kv heads (None where its own error was
    reported), features per head, position, `at(key)`, where an entry is written, and
    out_proj (None where its own error was reported)."""

    entries: dict
    kind: str
    kernel: Any
    heads: int
    kv_heads: int | None
    head_dim: int
    position: Any
    at: Callable[[str], Any]
    out_proj: bool | None = True


class Projection:
    """One projection form: a module `attndsl/mechanisms/<name>.py` defines `PROJECTION`, an
    instance of a subclass, found by its presence (`mechanisms.PROJECTIONS`, by `key`;
    `projection_of`, by its value's class's `key`)."""

    key: str  # the attention key that sets it (`key = name(...)`)
    name: str  # its call
    params: tuple[tuple[str, bool], ...] = ()  # (parameter, required)
    # the decoding cache's entries per layer in place of ("key", "value") (`cache_type`), or
    # () where it caches every head's keys and values
    cache: tuple[str, ...] = ()
    # why onnxruntime-genai cannot bind that cache (`{name}`: the attention's), or None
    genai: str | None = None
    # it projects the merged heads to d_model itself (`out`), in place of o_proj
    output: bool = False
    # the IR attributes of its `apply` nodes (after `mechanism`, which names its key), plain
    # values; their arithmetic is its `apply`, as a mechanism's (`base.Mechanism.apply`)
    attributes: tuple[str, ...] = ()
    reads_positions = False
    # with a recurrent kernel (`base_recurrent`): why it does not apply there, or None where
    # its own `conflicts` refuses it
    with_recurrent: str | None = "the kernel has its own projections"

    def read(self, c: Any, e: Any) -> Any:
        """The spec's value of `key = e` (None for `none`), or raise the checker's located
        diagnostic (`c` is the checker)."""
        raise NotImplementedError

    def conflicts(self, c: Any, value: Any, where: ProjectionWhere) -> bool:
        """Report what the attention sets that the form cannot honour; True if any."""
        return False

    def rotated(self, value: Any) -> int | None:
        """The features of each head RoPE rotates where `rope(...)` gives no `dim` (None:
        head_dim)."""
        return None

    def weights(self, spec: Any, value: Any, prefix: str) -> list:
        """Its tensors (weight_table.Weight) in place of the q, k and v projections, in the
        order a seeded module draws them."""
        raise NotImplementedError

    def heads(self, site: Any, value: Any, x: str) -> tuple[str, str, str]:
        """One pass: its nodes from the attention's input x to the q, k and v heads the core
        reads as any others."""
        raise NotImplementedError

    def decoding(self, site: Any, value: Any, x: str, cache: int,
                 keep: tuple[int, int] | None) -> tuple[str, str, str, Any]:
        """With `cache`: a decoding step's nodes from x to (q, the cached keys, the values
        the core reads, the attention the core runs as), its `cache` entries read from
        past_key_values.{cache}.<entry> and written to present.{cache}.<entry>, only the
        `keep` (first, recent) rows kept where given."""
        raise NotImplementedError

    def merged(self, site: Any, value: Any, o: str) -> str:
        """With `cache`: the decoding core's merged output -> the merged heads (B, L,
        heads * value_dim)."""
        return o

    def out(self, site: Any, value: Any, o: str, x: str) -> str:
        """With `output`: the merged heads o (B, L, heads * value_dim) -> (B, L, d_model), x
        the attention's input."""
        raise NotImplementedError

    def apply(self, xp: Any, x: Any, second: Any, **attrs: Any) -> Any:
        """The arithmetic of its `apply` nodes over the array namespace `xp`: x the node's
        first operand, `second` its second (None where it has none)."""
        raise NotImplementedError

    def cache_type(self, spec: Any, value: Any, entry: str, rows: str) -> Any:
        """The type (shapes.TensorType) of one of its `cache` entries over `rows` tokens."""
        raise NotImplementedError
