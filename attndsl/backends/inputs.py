"""A graph module's inputs, checked at the Python API's edge as the command line checks a
model's: by position or name, none missing, unknown or given twice; each of the type, rank
and fixed sizes the graph declares (`float[B, L, 64]`), with no empty batch or sequence, token
ids within the vocabulary, and floats of the module's own dtype."""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import UsageError
from ..ir import Graph, Op
from ..usage import check_token_ids

__all__ = ["check_float_dtype", "named_inputs"]


def named_inputs(graph: Graph, args: tuple[Tensor, ...],
                 kwargs: dict[str, Tensor]) -> dict[str, Tensor]:
    """The inputs by name; UsageError naming what is missing, unknown or given twice."""
    names = graph.inputs
    takes = f"`{graph.name}` takes {', '.join(names)}"
    if len(args) > len(names):
        raise UsageError(f"{takes}: {len(args)} inputs given by position")
    given = dict(zip(names, args, strict=False))
    for name, value in kwargs.items():
        if name not in names:
            raise UsageError(f"{takes}: no input named `{name}`")
        if name in given:
            raise UsageError(f"{takes}: `{name}` given twice (by position and by name)")
        given[name] = value
    missing = [n for n in names if n not in given]
    if missing:
        raise UsageError(f"{takes}: missing {', '.join(missing)}")
    if not torch.compiler.is_compiling():  # tracing checks nothing: shapes are symbols
        _check_shapes(graph, given)
    return given


def _check_shapes(graph: Graph, given: dict[str, Tensor]) -> None:
    """UsageError unless each input has the type, rank and fixed sizes the graph declares
    (`float[B, L, 64]`), its batch and sequence axes hold at least one row (a decoding
    graph's cache axes and memory may be empty), and B, L and S one size each."""
    sizes: dict[str, int] = {}
    for node in graph.nodes:
        if node.op is not Op.INPUT:
            continue
        value = given[node.out]
        dims = node.shape.dims
        expected = f"`{node.out}` must be {node.shape}"
        if not isinstance(value, Tensor):
            raise UsageError(f"{expected}, got {type(value).__name__} (a torch.Tensor)")
        if value.is_floating_point() != node.shape.is_float:
            raise UsageError(f"{expected}, got {str(value.dtype).removeprefix('torch.')}")
        if value.dim() != len(dims):
            raise UsageError(f"{expected}, got shape {list(value.shape)} ({value.dim()} "
                             f"axes, not {len(dims)})")
        for axis, (dim, size) in enumerate(zip(dims, value.shape, strict=True)):
            if isinstance(dim, int) and dim != size:
                raise UsageError(f"{expected}, got shape {list(value.shape)} (axis {axis} "
                                 f"is {size}, not {dim})")
            empty_ok = graph.decoding and dim in ("P", "M", "S")
            if isinstance(dim, str) and size < 1 and not empty_ok:
                raise UsageError(f"{expected}, got shape {list(value.shape)}: axis {axis} "
                                 f"({dim}) is empty")
            # one B, L and S for all inputs (a bounded cache's P differs by layer)
            if dim in ("B", "L", "S") and sizes.setdefault(dim, size) != size:
                raise UsageError(f"{expected}, got {dim} = {size} where another input has "
                                 f"{dim} = {sizes[dim]}")
        if node.out == "input_ids":
            _check_ids(graph, value)
        if node.out == "pixel_values":  # (a vision stack's image: one patch at least)
            size = next(n.attr("size") for n in graph.nodes if n.op is Op.PATCHES)
            if min(value.shape[2:]) < size:
                raise UsageError(f"{expected}, an image of at least one patch ({size} x {size} "
                                 f"pixels), got shape {list(value.shape)}")


def _check_ids(graph: Graph, ids: Tensor) -> None:
    """UsageError for a token id outside the embedding table: torch's embedding fails with
    `index out of range in self` on the CPU and a device-side assert on CUDA. Its cost, each
    forward: one comparison over the ids and, for ids on a GPU, one host synchronization (to
    read its answer); none while tracing or compiling (torch.jit.trace, torch.export,
    torch.compile), where the ids are symbols. A graph with no embedding takes no ids."""
    if torch.jit.is_tracing() or torch.compiler.is_compiling():
        return
    table = next((n.attr("weight") for n in graph.nodes if n.op is Op.EMBED), None)
    vocab = next((w.shape[0] for w in graph.weights if w.name == table), None)
    if vocab is None:
        return
    if bool(((ids < 0) | (ids >= vocab)).any()):  # on the ids' device; NumPy names the first
        check_token_ids(ids.detach().cpu().numpy(), vocab)


def check_float_dtype(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    """A forward pre-hook (`Layer.to_torch`): UsageError naming the dtype the module takes
    where a float input has another (a NumPy array's float64, say), which torch reports as
    `expected m1 and m2 to have the same dtype` deep in a matmul. Not under autocast, whose
    point is mixed dtypes, nor while tracing."""
    param = next((p for p in module.parameters() if p.is_floating_point()), None)
    if param is None or torch.compiler.is_compiling() or \
            torch.is_autocast_enabled(param.device.type):
        return
    dtype = param.dtype
    for name, value in (*zip(module.graph.inputs, args, strict=False), *kwargs.items()):
        if isinstance(value, Tensor) and value.is_floating_point() and value.dtype != dtype:
            have, want = (str(d).removeprefix("torch.") for d in (value.dtype, dtype))
            raise UsageError(f"`{name}` is {have}; this module takes {want}\n  = help: "
                             f"pass `{name}.to(torch.{want})`, or convert the module "
                             f"(`module.to(torch.{have})`)")
