"""What a feed-forward form is: one module that carries every facet of a block's feed-forward
other than one MLP (`ffn = name(...)`), as `base_kernel.Kernel` does for an
attention kernel: its value and checks, its weights, its nodes, its arithmetic over the array
namespace, and what the planner and quantization must know of it.

The spec holds its value in `Transformer.feed_forward` beside `ffn`, the MLP form it is made
of. A value names the blocks that run one MLP instead: its `dense_layers` run its `dense` MLP
(`Transformer.layer_ffn`), so every value carries those two fields."""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["FeedForward"]


class FeedForward:
    """One feed-forward form: a module `attndsl/mechanisms/<name>.py` defines `FFN`, an
    instance of a subclass, found by its presence (`mechanisms.FFNS`, `ffn_of`)."""

    name: str  # the call: `ffn = name(...)`
    params: tuple[tuple[str, bool], ...] = ()  # (parameter, required)
    # the IR attributes of its `ffn` node (after `ffn`), plain values, the last `kernel`: ""
    # as built, the form the planner chose on a planned target (`plan`)
    attributes: tuple[str, ...] = ()
    # whether its ONNX forms are its own (a lowering by its name, `strategies/<name>.py`);
    # False: the lowering runs its `run` over the ONNX array namespace
    lowered: bool = True

    def read(self, c: Any, e: Any) -> tuple[Any, Any]:
        """The MLP form its blocks are made of (`spec.Ffn`) and the spec's value of `ffn =
        name(...)`, or raise the checker's located diagnostic (`c` is the checker)."""
        raise NotImplementedError

    def check_layers(self, c: Any, value: Any, layers: int, e: Any) -> None:
        """Raise where the value does not fit a stack of `layers` blocks (`e`: its call)."""

    def summary(self, value: Any, mlp: str) -> str:
        """The graph header's words for it, its blocks' MLP written `mlp`."""
        raise NotImplementedError

    def mlps(self, value: Any) -> tuple[Any, ...]:
        """Its MLPs besides the stack's `ffn` (`spec.Ffn`, or None where absent): their
        widths bound verify's working memory."""
        return ()

    def weights(self, value: Any, ffn: Any, d_model: int, prefix: str) -> list[Any]:
        """Its tensors in block `prefix` (`weight_table.Weight`), in the order a seeded
        module draws them; `ffn` the MLP form it is made of."""
        raise NotImplementedError

    def expand(self, b: Any, value: Any, ffn: Any, prefix: str, x: str, d: Any) -> str:
        """Its nodes on block `prefix`'s input x (of type d): its `ffn` node (`Op.FFN`, its
        `attributes`) and any existing ops beside it; the value they make."""
        raise NotImplementedError

    def plan(self, node: Any, provider: str | None,
             dtype: str) -> tuple[str, str, str, tuple[str, ...]]:
        """For its `ffn` node on a planned target: the node's `kernel` attribute, the name
        of the choice, the layer it is in (the planner's Choice) and the reasons `explain`
        gives. Its ONNX forms are the lowering's by the form's name (`Lowering.strategies`:
        `strategies/<name>.py`), as a kernel's strategy lowers the kernel's node."""
        raise NotImplementedError

    # how a quantized export may read its weights, by form (`planner.rewrites`, which
    # `explain` prints), and the form in which its node runs as the provider's quantized
    # kernel (the lowering reads `Rewrites.quantized_kernels`, the nodes' prefixes)
    quantized_forms: ClassVar[dict[str, str]] = {}
    kernel_form: str = ""

    def quantized(self, node: Any, shapes: dict, q: Any) -> tuple[dict[str, str],
                                                                  dict[str, str]]:
        """For one of its nodes and a quantization `q` (quantize.Quantization): each weight
        it reads that a quantized export could store in blocks -> its form (one of
        `quantized_forms`), and weight -> why it stays float."""
        return {}, {}

    def run(self, xp: Any, x: Any, weight: Any, **attrs: Any) -> Any:
        """Its `ffn` node on the torch module: x (its input) as a tensor, `xp` the torch array
        namespace (`TorchArrays`), `weight(name)` a parameter, `attrs` the node's attributes
        after `ffn`; without ONNX forms of its own (`lowered` False), the same over
        `OnnxArrays` for the lowering."""
        raise NotImplementedError
