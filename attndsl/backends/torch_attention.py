"""The torch module's fused attention (`attention` nodes of a planned module, planner.torch_paths):
PyTorch's own fast paths where the mask allows, attndsl's block-sparse form elsewhere. Each node
runs the path its plan names (`strategy`), and a block_sparse node the function its planned rule
picks (`torch_paths.block_sparse_kernel` on the node's `flex` and `sdpa_side`): nothing here
chooses a path of its own.

- `sdpa`: F.scaled_dot_product_attention, with `is_causal` (no mask tensor) for plain causal
  or unmasked attention, else a boolean L x S mask (1 byte a pair; the fused kernels keep no
  L x S scores). Rows with no visible key attend to every key and are then set to zero, so
  their gradients are zeros rather than NaN. It is also bench's PyTorch baseline, which passes
  biases as a float mask.
- `block_sparse`: per block of n queries, only the K key blocks the planner's cover reaches
  (`softmax_core.block_sparse`, the ONNX lowering's arithmetic too, here over `TorchArrays`
  with autograd): memory grows with L x K*n (`_blocks`). Where its rule says, FlexAttention
  (`_flex`) or, at small shapes, `sdpa` with the mask runs it instead.
- `_flex`: torch's FlexAttention, compiled once per shape family, with a BlockMask from the
  mask's own `visible` (masks.evaluate) as its mask_mod and the score formulas (ALiBi, T5
  buckets, score modifiers) as its score_mod. Torch 2.13 has no FlexAttention backward on the
  CPU."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import masks, mechanisms
from ..errors import UsageError
from ..ir import Node
from ..ir.ops import BIAS_OPERANDS, SCORE_BIASES
from ..planner.torch_paths import SDPA_SIDE, block_sparse_kernel
from . import formulas, softmax_core
from .softmax_core import CoreOps, block_sparse
from .torch_arrays import TorchArrays
from .torch_masks import mask_context, visible

__all__ = ["attention", "score_bias"]

Env = dict[str, Tensor]
# `_boolean_mask` keeps masks of up to 4 x SDPA_PAIRS pairs (the planned SDPA switch's default
# size, planner.torch_paths.SDPA_SIDE)
SDPA_PAIRS = SDPA_SIDE * SDPA_SIDE


def attention(m: nn.Module, node: Node, env: Env) -> Tensor:
    """An `attention` node: (B, L, H * dv) from q (B, H, L, d), k and v (B, Hkv, S, d)."""
    q, k, v = (env[node.args[i]] for i in range(3))
    if node.attr("strategy") == "block_sparse":
        run = block_sparse_kernel(dict(node.attrs), q.device.type, q.shape[2] * k.shape[2],
                                  m.training)
        out = {"flex": _flex, "sdpa": _sdpa, "blocks": _blocks}[run](m, node, env, q, k, v)
    else:
        out = _sdpa(m, node, env, q, k, v)
    return out.transpose(1, 2).flatten(2)


def _dropout(m: nn.Module, node: Node) -> float:
    return dict(node.attrs).get("dropout", 0.0) if m.training else 0.0


def _sdpa(m: nn.Module, node: Node, env: Env, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    groups = node.attr("heads") // node.attr("kv_heads")
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    expr, bias, scale = node.attr("expr"), node.attr("bias"), node.attr("scale")
    drop = _dropout(m, node)
    plain = expr == masks.Full() or (expr == masks.Causal() and q.shape[2] == k.shape[2])
    if bias is None and plain:
        return F.scaled_dot_product_attention(q, k, v, is_causal=expr == masks.Causal(),
                                              scale=scale, dropout_p=drop)
    mask, any_key = _boolean_mask(m, node, env, q.shape[2], k.shape[2], q.device)
    if bias is not None:
        qi, ki = (torch.arange(n, device=q.device) for n in (q.shape[2], k.shape[2]))
        rows = env[node.args[3]] if bias in BIAS_OPERANDS else None  # relative logits'
        table = score_bias(m, dict(node.attrs), node.attr("heads"), qi[:, None], ki[None, :],
                           rows)
        mask = torch.where(mask, table, torch.finfo(torch.float32).min).to(q.dtype)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, dropout_p=drop)
    return out * any_key.to(out.dtype)


def _boolean_mask(m: nn.Module, node: Node, env: Env, L: int, S: int,
                  device: torch.device) -> tuple[Tensor, Tensor]:
    """(SDPA's boolean mask, each row's `any key`): an empty row attends to every key, then is
    zeroed. A planned module keeps a mask without runtime inputs per shape (up to 4 x
    SDPA_PAIRS pairs): a training loop at one length computes it once."""
    expr = node.attr("expr")
    keep = (getattr(m, "attention_path", "dense") != "dense" and "attention_mask" not in env
            and not masks.runtime_inputs(expr) and L * S <= 4 * SDPA_PAIRS)
    cache = m.__dict__.setdefault("_mask_cache", {}) if keep else {}
    key = (node.attrs, L, S, device)
    if key not in cache:
        seen = visible(expr, env)
        if seen.dim() == 3:
            seen = seen.unsqueeze(1)  # (B, 1, L, S)
        any_key = seen.any(dim=-1, keepdim=True)
        cache[key] = (seen | ~any_key, any_key)
    return cache[key]


def score_bias(m: nn.Module, attrs: dict, heads: int, q_pos: Tensor, k_pos: Tensor,
               rows: Tensor | None = None) -> Tensor:
    """The float32 score bias (H, ...) of `softmax_core.score_bias` at the broadcast of the
    positions q_pos and k_pos (of one rank); `attrs`: a score_bias node's, or an attention
    core's; `rows`: relative logits' relative states (the bias is then (B, H, ...))."""
    tabled = "weight" in SCORE_BIASES[attrs.get("bias", attrs.get("kind"))]
    table = m.get_parameter(attrs["weight"]) if tabled else None
    return softmax_core.score_bias(TorchArrays(q_pos.device), attrs, heads, (heads,), table,
                                   q_pos, k_pos, rows)


def _scores(m: nn.Module, node: Node, q: Tensor, k: Tensor, q_pos: Tensor,
            k_pos: Tensor) -> Tensor:
    """scale * q.k (+ bias) (score modifiers), float32: q (B, Hkv, g, ..., n, d), k (B, Hkv, 1, ...,
    m, d), biases at positions q_pos (..., n, 1) and k_pos (..., 1, m)."""
    s = torch.matmul(q.float() * node.attr("scale"), k.float().transpose(-1, -2))
    if node.attr("bias"):
        bias = score_bias(m, dict(node.attrs), node.attr("heads"), q_pos, k_pos)  # (H, ...)
        s = s + bias.reshape(node.attr("kv_heads"), -1, *bias.shape[1:])
    return mechanisms.score(TorchArrays(s.device), node, s)


def _attend(m: nn.Module, node: Node, s: Tensor, seen: Tensor, v: Tensor) -> Tensor:
    """The masked softmax of scores s (B, Hkv, g, ..., keys) @ v; empty rows give zeros."""
    extra = mechanisms.softmax_logits(node)
    if extra is not None:  # (H,) -> (Hkv, g, 1, ..., 1) against the rows
        kv = node.attr("kv_heads")
        extra = m.get_parameter(extra).float().view(kv, -1, *[1] * (s.dim() - 3))
    if masks.runtime_inputs(node.attr("expr")):
        seen = seen.unsqueeze(1).unsqueeze(1)  # (B, 1, 1, ...)
    probs, any_key = formulas.masked_softmax(TorchArrays(s.device), s, seen, extra)
    drop = _dropout(m, node)
    if drop:
        probs = F.dropout(probs, p=drop)
    return torch.matmul(probs.to(v.dtype), v) * any_key.to(v.dtype)


def _blocks(m: nn.Module, node: Node, env: Env, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """`softmax_core.block_sparse` (the ONNX lowering's arithmetic too) over `TorchArrays`:
    per block of n queries the K key blocks the cover reaches, then the rows of global
    queries. (B, H, L, dv)."""
    L, S = q.shape[2], k.shape[2]
    ops = CoreOps(scores=lambda q, k, q_pos, k_pos: _scores(m, node, q, k, q_pos, k_pos),
                  attend=lambda s, seen, v: _attend(m, node, s, seen, v),
                  context=lambda: mask_context(env, L, S))
    return block_sparse(TorchArrays(q.device), node, q, k, v, L, S, q.shape[-1], v.shape[-1],
                        ops)


@functools.cache
def _compiled_flex() -> Callable:
    """flex_attention compiled once; torch recompiles it per mask and shape family."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention)


def _flex(m: nn.Module, node: Node, env: Env, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """FlexAttention with a BlockMask of the mask's visibility and the score formulas as its
    score_mod; rows with no visible key are zeros (FlexAttention's own rule). The mods are
    made once per distinct attention (its compiled kernel serves every call and length) and read
    the call's sizes and runtime inputs from `state`; a mask without runtime inputs keeps its
    BlockMask per length."""
    from torch.nn.attention.flex_attention import create_block_mask

    if not q.is_cuda and torch.is_grad_enabled() and q.requires_grad:
        raise UsageError("path = 'flex' on the CPU: torch's FlexAttention has no CPU backward; "
                         "train with path = 'auto' (attndsl's block-sparse form), or run "
                         "under torch.no_grad()")
    B, _, L, _ = q.shape
    S = k.shape[2]
    cache = m.__dict__.setdefault("_flex_cache", {})
    if node.attrs not in cache:  # one per distinct attention: a stack's layers share theirs
        cache[node.attrs] = _mods(m, node)
    mask_mod, score_mod, state = cache[node.attrs]
    state["ctx"] = masks.MaskContext(torch.tensor(L, device=q.device),
                                     torch.tensor(S, device=q.device))
    runtime = bool(masks.runtime_inputs(node.attr("expr")))
    key = (L, S, q.device)
    if runtime:  # (B, L, S): the runtime inputs differ per batch row and call
        state["seen"] = visible(node.attr("expr"), env)
        block_mask = create_block_mask(mask_mod, B, None, L, S, device=q.device)
    else:
        if key not in state:
            state[key] = create_block_mask(mask_mod, None, None, L, S, device=q.device)
        block_mask = state[key]
    return _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=block_mask,
                             scale=node.attr("scale"),
                             enable_gqa=node.attr("heads") != node.attr("kv_heads"))


def _mods(m: nn.Module, node: Node) -> tuple[Callable, Callable | None, dict]:
    """(mask_mod, score_mod or None, the state they read) of one attention node."""
    expr, modified, attrs, heads = (node.attr("expr"), mechanisms.modifiers(node),
                                    dict(node.attrs), node.attr("heads"))
    state: dict = {}
    if masks.runtime_inputs(expr):
        def mask_mod(b: Tensor, h: Tensor, qi: Tensor, ki: Tensor) -> Tensor:
            return state["seen"][b, qi, ki]
    else:
        def mask_mod(b: Tensor, h: Tensor, qi: Tensor, ki: Tensor) -> Tensor:
            return masks.evaluate(expr, qi, ki, state["ctx"])
    if not (node.attr("bias") or modified):
        return mask_mod, None, state

    def score_mod(s: Tensor, b: Tensor, h: Tensor, qi: Tensor, ki: Tensor) -> Tensor:
        if attrs["bias"]:
            s = s + score_bias(m, attrs, heads, qi, ki)[h]
        return mechanisms.score(TorchArrays(s.device), node, s)
    return mask_mod, score_mod, state
