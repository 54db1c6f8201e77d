"""Graph IR -> a trainable `torch.nn.Module` that runs the graph: one small function per op
(`@impl(Op.X)`), parameters named, shaped and drawn as the graph's weight table says (Hugging
Face layout), so HF-style state dicts load with `load_state_dict`. The `portable` export traces
this module, so `to_torch`, the portable export and the direct ONNX lowering all start from the
same IR.

The forward pass is written for `torch.export` as well as eager use: every size is read from the
inputs, masks and position tables are computed from `arange` (never stored), and no Python
branch depends on a tensor's values. Scores, biases and softmax are float32 whatever the model
dtype (q and k are widened before their product, which is then exact)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import masks
from ..ir import Graph, Node, Op, build
from ..positions import alibi_slopes, rope_inv_freq, sinusoidal_inv_freq, t5_bucket_float32
from ..spec import Attention, Transformer

__all__ = ["GraphModule", "build_module", "export_program", "seeded_module"]

Env = dict[str, Tensor]
_IMPL: dict[Op, Callable[[GraphModule, Node, Env], Tensor]] = {}


def impl(op: Op) -> Callable:
    def register(fn: Callable) -> Callable:
        _IMPL[op] = fn
        return fn
    return register


class GraphModule(nn.Module):
    """Runs `graph`: forward(x, [memory], [key_lengths], [segment_ids]) -> y. Its parameters are
    the graph's weights, under their state-dict names (`layers.0.self_attn.q_proj.weight`)."""

    def __init__(self, graph: Graph):
        super().__init__()
        self.graph = graph
        for w in graph.weights:
            *path, leaf = w.name.split(".")
            owner: nn.Module = self
            for part in path:
                if not hasattr(owner, part):
                    owner.add_module(part, nn.Module())
                owner = getattr(owner, part)
            owner.register_parameter(leaf, nn.Parameter(torch.empty(w.shape)))
        self._params = dict(self.named_parameters())

    def weight(self, name: str) -> Tensor:
        return self._params[name]

    def forward(self, x: Tensor, memory: Tensor | None = None,
                key_lengths: Tensor | None = None, segment_ids: Tensor | None = None) -> Tensor:
        given = {"x": x, "memory": memory, "key_lengths": key_lengths,
                 "segment_ids": segment_ids}
        env: Env = {}
        for node in self.graph.nodes:
            if node.op is Op.INPUT:
                env[node.out] = given[node.out]
            else:
                env[node.out] = _IMPL[node.op](self, node, env)
        return env[self.graph.output]

    def _apply(self, fn, recurse=True):  # .to(dtype) etc. replace parameters: look them up anew
        out = super()._apply(fn, recurse)
        self._params = dict(self.named_parameters())
        return out


def build_module(spec: Attention | Transformer) -> GraphModule:
    """A module for a resolved attention or transformer (weights uninitialised: see
    `seeded_module`)."""
    return GraphModule(build(spec))


def seeded_module(spec: Attention | Transformer, seed: int) -> GraphModule:
    """The module with weights drawn from `seed` alone (the global RNG is left untouched), in
    the graph's weight order: linear layers as nn.Linear draws them, embeddings N(0, 1); then
    norm weights around 1 and norm biases around 0 (drawn rather than set, so verification
    exercises every tensor)."""
    module = build_module(spec)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        params = dict(module.named_parameters())
        for w in module.graph.weights:
            p = params[w.name]
            if w.init == "linear":
                nn.init.kaiming_uniform_(p, a=math.sqrt(5))
            elif w.init == "linear_bias":
                nn.init.uniform_(p, -1 / math.sqrt(w.fan_in), 1 / math.sqrt(w.fan_in))
            elif w.init == "embedding":
                nn.init.normal_(p)
            else:
                p.fill_(1.0 if w.init == "norm_weight" else 0.0)
        for w in module.graph.weights:
            if w.init == "norm_weight":
                params[w.name].copy_(1.0 + 0.1 * torch.randn(w.shape))
            elif w.init == "norm_bias":
                params[w.name].copy_(0.1 * torch.randn(w.shape))
    return module.eval()


def _arg(node: Node, env: Env, i: int = 0) -> Tensor:
    return env[node.args[i]]


def _lengths(env: Env) -> tuple[Tensor, Tensor]:
    """Query and key positions, (L, 1) and (1, S), from the graph's inputs."""
    x = env["x"]
    S = env["memory"].shape[1] if env.get("memory") is not None else x.shape[1]
    qi = torch.arange(x.shape[1], device=x.device).unsqueeze(1)
    ki = torch.arange(S, device=x.device).unsqueeze(0)
    return qi, ki


@impl(Op.ADD_POSITION)
def _add_position(m: GraphModule, node: Node, env: Env) -> Tensor:
    x = _arg(node, env)
    L = x.shape[1]
    if node.attr("kind") == "learned":
        table = m.weight(node.attr("weight"))
        return x + F.embedding(torch.arange(L, device=x.device), table).to(x.dtype)
    return x + sinusoidal_table(L, x.shape[2], x.dtype, x.device)


def sinusoidal_table(L: int, d: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d))."""
    pos = torch.arange(L, device=device, dtype=torch.float32).unsqueeze(1)  # (L, 1)
    inv = torch.tensor(sinusoidal_inv_freq(d), device=device)
    angle = pos * inv  # (L, d/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).to(dtype)  # (L, d)


@impl(Op.LINEAR)
def _linear(m: GraphModule, node: Node, env: Env) -> Tensor:
    bias = node.attr("bias")
    return F.linear(_arg(node, env), m.weight(node.attr("weight")),
                    m.weight(bias) if bias else None)


@impl(Op.SPLIT_HEADS)
def _split_heads(m: GraphModule, node: Node, env: Env) -> Tensor:
    heads, dim = node.attr("heads"), node.attr("dim")
    return _arg(node, env).unflatten(-1, (heads, dim)).transpose(1, 2)  # (B, h, n, d)


@impl(Op.MERGE_HEADS)
def _merge_heads(m: GraphModule, node: Node, env: Env) -> Tensor:
    return _arg(node, env).transpose(1, 2).flatten(2)  # (B, L, H * dv)


@impl(Op.NORM)
def _norm(m: GraphModule, node: Node, env: Env) -> Tensor:
    x = _arg(node, env)
    module, eps = node.attr("module"), node.attr("eps")
    weight = m.weight(f"{module}.weight")
    if node.attr("kind") == "layernorm":
        bias = m.weight(f"{module}.bias") if node.attr("bias") else None
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    # statistics in float32 (x^2 overflows float16 from |x| = 256), as Hugging Face does
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return h.to(x.dtype) * weight


@impl(Op.ROPE)
def _rope(m: GraphModule, node: Node, env: Env) -> Tensor:
    """Rotate the first `dim` features of each head by position (0..n-1)."""
    x = _arg(node, env)
    dim = node.attr("dim")
    pos = torch.arange(x.shape[2], device=x.device, dtype=torch.float32).unsqueeze(1)  # (n, 1)
    inv = torch.tensor(rope_inv_freq(node.attr("theta"), dim), device=x.device)
    angle = pos * inv  # (n, dim/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    rot, rest = x[..., :dim], x[..., dim:]
    if node.attr("interleaved"):
        even, odd = rot[..., 0::2], rot[..., 1::2]
        rot = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
    else:
        half = dim // 2
        x1, x2 = rot[..., :half], rot[..., half:]
        rot = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return torch.cat([rot, rest], dim=-1)


@impl(Op.REPEAT_KV)
def _repeat_kv(m: GraphModule, node: Node, env: Env) -> Tensor:
    # (B, Hkv, S, d) -> (B, H, S, d): head h reads kv head h // groups
    return _arg(node, env).repeat_interleave(node.attr("groups"), dim=1)


@impl(Op.SCORES)
def _scores(m: GraphModule, node: Node, env: Env) -> Tensor:
    q, k = _arg(node, env, 0), _arg(node, env, 1)
    # float32 whatever the model dtype (as fused kernels do): half-precision products are exact
    return torch.matmul(q.float() * node.attr("scale"), k.float().transpose(-1, -2))


@impl(Op.SCORE_BIAS)
def _score_bias(m: GraphModule, node: Node, env: Env) -> Tensor:
    qi, ki = _lengths(env)
    return _arg(node, env) + score_bias(m, dict(node.attrs), node.attr("kind"), qi, ki,
                                        _arg(node, env).shape[1])


def score_bias(m: GraphModule, attrs: dict, kind: str, qi: Tensor, ki: Tensor,
               heads: int) -> Tensor:
    """The float32 score bias of ALiBi or T5 relative positions, (H, L, S)."""
    if kind == "alibi":
        slopes = torch.tensor(alibi_slopes(heads), dtype=torch.float32, device=qi.device)
        return -slopes[:, None, None] * (qi - ki).abs().float()
    bucket = t5_bucket_float32(torch, ki - qi, attrs["buckets"], attrs["max_distance"],
                               attrs["bidirectional"])  # (L, S)
    return F.embedding(bucket, m.weight(attrs["weight"])).permute(2, 0, 1).float()


@impl(Op.SOFTCAP)
def _softcap(m: GraphModule, node: Node, env: Env) -> Tensor:
    c = node.attr("cap")
    return c * torch.tanh(_arg(node, env) / c)


@impl(Op.MASK)
def _mask(m: GraphModule, node: Node, env: Env) -> Tensor:
    return visible(node.attr("expr"), env)


def visible(expr: masks.Mask, env: Env) -> Tensor:
    """(L, S), or (B, L, S) with runtime inputs."""
    qi, ki = _lengths(env)
    # lengths as 0-d tensors (the last index + 1): torch.onnx.export cannot lower arithmetic
    # between a tensor and a symbolic size such as `h % ceil(S / n)`
    return masks.evaluate(expr, qi, ki, L=qi[-1, 0] + 1, S=ki[0, -1] + 1,
                          key_lengths=env.get("key_lengths"), segment_ids=env.get("segment_ids"))


@impl(Op.SOFTMAX)
def _softmax(m: GraphModule, node: Node, env: Env) -> Tensor:
    scores, seen = _arg(node, env, 0), _arg(node, env, 1)
    if seen.dim() == 3:
        seen = seen.unsqueeze(1)  # (B, 1, L, S)
    probs = torch.softmax(scores.masked_fill(~seen, torch.finfo(scores.dtype).min), dim=-1)
    # a row with no visible key would be uniform over masked keys: make it zeros instead
    probs = probs * seen.any(dim=-1, keepdim=True).to(probs.dtype)
    if m.training and node.attr("dropout"):
        probs = F.dropout(probs, p=node.attr("dropout"))
    return probs


@impl(Op.ATTEND)
def _attend(m: GraphModule, node: Node, env: Env) -> Tensor:
    v = _arg(node, env, 1)
    return torch.matmul(_arg(node, env, 0).to(v.dtype), v)  # (B, H, L, dv)


@impl(Op.ATTENTION)
def _attention(m: GraphModule, node: Node, env: Env) -> Tensor:
    """A fused core through F.scaled_dot_product_attention with a dense boolean mask (no mask
    for plain causal or unmasked attention without biases): what a user would write in PyTorch,
    and the baseline `attndsl bench` measures against."""
    q, k, v = (_arg(node, env, i) for i in range(3))
    groups = node.attr("heads") // node.attr("kv_heads")
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    expr, bias = node.attr("expr"), node.attr("bias")
    if bias is None and expr in (masks.Causal(), masks.Full()):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=expr == masks.Causal(),
                                             scale=node.attr("scale"))
    else:
        seen = visible(expr, env)
        if seen.dim() == 3:
            seen = seen.unsqueeze(1)
        mask = seen
        if bias is not None:
            qi, ki = _lengths(env)
            table = score_bias(m, dict(node.attrs), bias, qi, ki, node.attr("heads"))
            mask = torch.where(seen, table, torch.finfo(torch.float32).min).to(q.dtype)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=node.attr("scale"))
    return out.transpose(1, 2).flatten(2)


def feature_map(x: Tensor, feature: str) -> Tensor:
    if feature == "elu":
        return F.elu(x) + 1.0
    if feature == "relu":
        return F.relu(x)
    return torch.softmax(x, dim=-1)


@impl(Op.LINEAR_ATTENTION)
def _linear_attention(m: GraphModule, node: Node, env: Env) -> Tensor:
    """y_q = phi(q).sum_k phi(k) v_k^T / max(phi(q).sum_k phi(k), 1e-6); causal sums k <= q.
    Computed in float32 (the sums over keys overflow float16 at long lengths)."""
    q, k, v = (_arg(node, env, i) for i in range(3))
    dtype = v.dtype
    q, k, v = q.float(), k.float(), v.float()
    feature = node.attr("feature")
    fq, fk = feature_map(q, feature), feature_map(k, feature)  # (B, H, L, d), (B, H, S, d)
    if node.attr("causal"):
        L, S = q.shape[2], k.shape[2]
        weights = torch.matmul(fq, fk.transpose(-1, -2))  # (B, H, L, S)
        keep = torch.arange(S, device=q.device)[None, :] <= torch.arange(
            L, device=q.device)[:, None]
        weights = weights * keep.to(weights.dtype)
        num = torch.matmul(weights, v)  # (B, H, L, dv)
        den = weights.sum(-1, keepdim=True)  # (B, H, L, 1)
    else:
        kv = torch.matmul(fk.transpose(-1, -2), v)  # (B, H, d, dv)
        num = torch.matmul(fq, kv)  # (B, H, L, dv)
        den = (fq * fk.sum(2, keepdim=True)).sum(-1, keepdim=True)  # (B, H, L, 1)
    return (num / den.clamp_min(1e-6)).to(dtype)


@impl(Op.ACTIVATION)
def _activation(m: GraphModule, node: Node, env: Env) -> Tensor:
    h = _arg(node, env)
    kind = node.attr("kind")
    if kind == "relu":
        return F.relu(h)
    if kind == "silu":
        return F.silu(h)
    approximate = "tanh" if kind == "gelu_tanh" else "none"
    if h.dtype == torch.bfloat16:  # in float32: the CUDA provider has no bfloat16 Gelu
        return F.gelu(h.float(), approximate=approximate).to(h.dtype)
    return F.gelu(h, approximate=approximate)


@impl(Op.MUL)
def _mul(m: GraphModule, node: Node, env: Env) -> Tensor:
    return _arg(node, env, 0) * _arg(node, env, 1)


@impl(Op.ADD)
def _add(m: GraphModule, node: Node, env: Env) -> Tensor:
    drop = dict(node.attrs).get("dropout")
    branch = _arg(node, env, 1)
    if m.training and drop:
        branch = F.dropout(branch, p=drop)
    return _arg(node, env, 0) + branch


def export_program(spec: Attention | Transformer, module: nn.Module,
                   dtype: str = "float32") -> bytes:
    """A serialized `torch.export` program with dynamic batch and lengths, loadable with
    `torch.export.load` and no attndsl installed."""
    import io

    from ..dtypes import torch_dtype
    from .onnx import Positional, dynamic_shapes, example_inputs, input_names

    names = input_names(spec)
    example = example_inputs(spec, dtype=torch_dtype(dtype))
    program = torch.export.export(Positional(module.eval(), names),
                                  tuple(example[n] for n in names),
                                  dynamic_shapes=dynamic_shapes(names))
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()
