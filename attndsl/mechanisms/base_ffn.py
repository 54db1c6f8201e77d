"""What a feed-forward form is: one module that carries every facet of a block's feed-forward
other than one MLP (`ffn = name(...)`: a mixture of experts), as `base.Kernel` does for an
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
    # the IR ops of its nodes (a backend implementing one reads the form's arithmetic from
    # the module whose op it is), and the one a planned target chooses a form for (`plan`)
    ops: tuple[Any, ...] = ()
    planned: Any = None

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
        """Its nodes on block `prefix`'s input x (of type d): the value they make."""
        raise NotImplementedError

    def plan(self, node: Any, by_name: dict, provider: str | None,
             dtype: str) -> tuple[str, str, tuple[str, ...]]:
        """For its `planned` node on a planned target: the node's `kernel` attribute, the
        layer it is in (the planner's Choice) and the reasons `explain` gives."""
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

    # the arithmetic of its ops (`ops`: a mixture's `route` and `experts`) over the array
    # namespace, which the torch backend's implementations of those ops call; their ONNX
    # forms are backends/lower/experts.py's (ONNX's alone)
    def route(self, xp: Any, logits: Any, top_k: int, router: str, normalize: bool,
              scale: float, **options: Any) -> Any:
        """Gates (tokens, experts), float32, from the router's logits."""
        raise NotImplementedError

    def expert_mlp(self, xp: Any, x: Any, act: str, gated: bool, weights: list[Any],
                   biases: list[Any], **options: Any) -> Any:
        """One expert's MLP on its tokens' rows."""
        raise NotImplementedError
