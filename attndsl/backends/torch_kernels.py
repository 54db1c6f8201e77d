"""The torch module's kernels beyond plain attention (docs/LANGUAGE.md, Kernels, and core
selectors): a core selector's switch, a kernel's sequence projection, a kernel module's
core, a causal convolution, and a feed-forward form's node, each `(module, node, env) ->
tensor` as `torch.IMPLS` runs them."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from .. import masks
from ..ir import Node, Op
from ..ir.ops import conv_inputs
from ..mechanisms import FFNS, KERNELS
from ..spec import RUNTIME_INPUTS
from .conv import causal_conv, conv_window, new_tokens
from .torch_arrays import TorchArrays
from .torch_masks import kept_keys, lengths

__all__ = ["IMPLS"]

Env = dict[str, Tensor]
IMPLS: dict[Op, Callable] = {}


def impl(op: Op) -> Callable:
    def register(fn: Callable) -> Callable:
        IMPLS[op] = fn
        return fn
    return register


def _arg(node: Node, env: Env, i: int = 0) -> Tensor:
    return env[node.args[i]]


@impl(Op.SWITCH)
def _switch(m: nn.Module, node: Node, env: Env) -> Tensor:
    """A core selector's switch: the first branch whose up_to holds the query length L, else
    the last;
    through torch.cond, so an exported program keeps every branch (one If per threshold)."""
    bounds, branches, outputs = node.attr("up_to"), node.attr("branches"), node.attr("outputs")
    made = {n.out for branch in branches for n in branch}
    outer = sorted({a for branch in branches for n in branch for a in n.args} - made)
    names = ["x", *(n for n in outer if n != "x"),
             *(n for n in ("memory", *RUNTIME_INPUTS) if n in env)]

    def variant(i: int) -> Callable[..., Tensor]:
        def run(*operands: Tensor) -> Tensor:
            local = dict(zip(names, operands, strict=True))
            for n in branches[i]:
                local[n.out] = m.run_node(n, local)
            return local[outputs[i]]
        return run

    def choose(i: int) -> Callable[..., Tensor]:
        if i == len(bounds):
            return variant(i)

        def run(*operands: Tensor) -> Tensor:
            return torch.cond(operands[0].shape[1] <= bounds[i], variant(i), choose(i + 1),
                              operands)
        return run

    return choose(0)(*(env[n] for n in names))


@impl(Op.SEQ_PROJECT)
def _seq_project(m: nn.Module, node: Node, env: Env) -> Tensor:
    """A kernel module's rows (`Kernel.rows`): E[..., :n] @ keys, the keys the mask hides
    zeroed first."""
    t = _arg(node, env)  # (B, h, n, d)
    n = t.shape[2]
    expr = node.attr("expr")
    if expr != masks.Full():
        kept = kept_keys(expr, n, env, t.device).reshape(-1, 1, n, 1)
        t = torch.where(kept, t, torch.zeros((), dtype=t.dtype, device=t.device))
    # the first n columns by index_select, not a slice: torch.export would guard n != max_len
    # (a slice of every column is the tensor itself) and refuse the dynamic length
    columns = torch.arange(n, device=t.device)
    e = m.weight(node.attr("weight")).index_select(-1, columns)
    return torch.matmul(e.to(t.dtype), t)


def _real(node: Node, env: Env, L: int, xp: TorchArrays) -> Tensor | None:
    """A convolution's or a kernel's real tokens (B, L), float32: a decoding call's from
    attention_mask, one pass's from its `padding` (key_lengths), or None (every token)."""
    if node.attr("decoding"):
        return new_tokens(xp, env["attention_mask"], L)
    if node.attr("padding") is None:
        return None
    return kept_keys(node.attr("padding"), L, env, xp.device).reshape(-1, L).float()


@impl(Op.CAUSAL_CONV)
def _causal_conv(m: nn.Module, node: Node, env: Env) -> Tensor:
    n = len(conv_inputs(node))
    parts = [env[a] for a in node.args[:n]]
    xp, width = TorchArrays(parts[0].device), node.attr("width")
    past = env[node.args[n]] if node.attr("decoding") else None  # the past inputs
    full = conv_window(xp, parts, width, past, _real(node, env, parts[0].shape[1], xp))
    if node.attr("part") == "state":  # the last width - 1 inputs
        return full[:, full.shape[1] - (width - 1):].to(parts[0].dtype)
    bias = dict(node.attrs).get("bias")
    return causal_conv(xp, full, m.weight(node.attr("weight")), width, xp.dtype(parts[0]),
                       node.attr("activation"), None if bias is None else m.weight(bias))


@impl(Op.ROWS)
def _rows(m: nn.Module, node: Node, env: Env) -> Tensor:
    return _arg(node, env)[:, :, node.attr("start"):node.attr("stop")]


@impl(Op.KERNEL)
def _kernel(m: nn.Module, node: Node, env: Env) -> Tensor:
    """A kernel module's core, from its module (mechanisms.KERNELS): the query and key
    indices first where it is `indexed` and causal, then the keys it sees."""
    kernel = KERNELS[node.attr("kernel")]
    if kernel.own_layer:  # its node's arguments, weights, real tokens; a branch in Python
        args = [_arg(node, env, i) for i in range(len(node.args))]
        xp = TorchArrays(args[0].device)
        return kernel.run(xp, args, [m.weight(w) for w in node.attr("weights")],
                          lambda: _real(node, env, args[0].shape[2], xp),
                          lambda cond, branches: branches[0 if cond() else 1][1](),
                          **dict(node.attrs[1:]))
    heads = [_arg(node, env, i) for i in range(2 if kernel.shares_keys else 3)]
    q, k, v = (heads[0], None, heads[1]) if kernel.shares_keys else heads
    kept, attrs = None, dict(node.attrs[1:])
    if kernel.indexed:
        attrs["index"] = lengths(env) if attrs.get("causal") else None
    if "attention_mask" in env:  # decoding: the cache's real keys, (B, n)
        kept = env["attention_mask"] != 0
    elif attrs.get("keys", masks.Full()) != masks.Full():  # the keys its mask shows, (B|1, n)
        kept = kept_keys(attrs["keys"], q.shape[2], env, q.device).reshape(-1, q.shape[2])
    return kernel.apply(TorchArrays(q.device), q, k, v, kept, **attrs)


@impl(Op.FFN)
def _ffn(m: nn.Module, node: Node, env: Env) -> Tensor:
    """A feed-forward form's node, as its module runs it (mechanisms.FFNS, `run`)."""
    x = _arg(node, env)
    return FFNS[node.attr("ffn")].run(TorchArrays(x.device), x, m.weight, **dict(node.attrs[1:]))
