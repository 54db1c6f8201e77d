"""Resolved spec -> a trainable `torch.nn.Module` whose parameter names follow docs/LANGUAGE.md
(Hugging Face layout), so HF-style state dicts load with `load_state_dict`.

The forward pass is written for `torch.export` as well as eager use: every size is read from the
inputs, masks and position tables are computed from `arange` (never stored), and no Python
branch depends on a tensor's values."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import masks
from ..positions import alibi_slopes, rope_inv_freq, t5_bucket_float32
from ..spec import (
    Alibi,
    Attention,
    Ffn,
    Learned,
    LinearKernel,
    RelativeBias,
    Rope,
    Sinusoidal,
    Transformer,
)

__all__ = ["AttentionModule", "TransformerModule", "build_module", "seeded_module"]


def build_module(spec: Attention | Transformer) -> nn.Module:
    """A module for a resolved attention or transformer (weights uninitialised: see
    `seeded_module`)."""
    if isinstance(spec, Transformer):
        return TransformerModule(spec)
    return AttentionModule(spec)


def seeded_module(spec: Attention | Transformer, seed: int) -> nn.Module:
    """The module with weights drawn from `seed` alone (the global RNG is left untouched).

    Norm weights and biases are drawn around their usual values (1 and 0) rather than set to
    them, so verification exercises every tensor."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build_module(spec)
        with torch.no_grad():
            for mod in module.modules():
                if isinstance(mod, RMSNorm | nn.LayerNorm):
                    mod.weight.copy_(1.0 + 0.1 * torch.randn_like(mod.weight))
                    if getattr(mod, "bias", None) is not None:
                        mod.bias.copy_(0.1 * torch.randn_like(mod.bias))
    return module.eval()


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight (no bias)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        # statistics in float32 (x^2 overflows float16 from |x| = 256), as Hugging Face does
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return h.to(x.dtype) * self.weight


def _norm(kind: str, dim: int, *, bias: bool) -> nn.Module:
    if kind == "rmsnorm":
        return RMSNorm(dim, 1e-6)
    return nn.LayerNorm(dim, eps=1e-5, bias=bias)


class AttentionModule(nn.Module):
    """One attention layer: forward(x, [memory], [key_lengths], [segment_ids]) -> y."""

    def __init__(self, spec: Attention, *, absolute_positions: bool = True):
        super().__init__()
        self.spec = spec
        s = spec
        self.q_proj = nn.Linear(s.d_model, s.heads * s.head_dim, bias=s.bias)
        self.k_proj = nn.Linear(s.memory_dim, s.kv_heads * s.head_dim, bias=s.bias)
        self.v_proj = nn.Linear(s.memory_dim, s.kv_heads * s.value_dim, bias=s.bias)
        if s.out_proj:
            self.o_proj = nn.Linear(s.heads * s.value_dim, s.d_model, bias=s.bias)
        if s.qk_norm:
            self.q_norm = _norm(s.qk_norm, s.head_dim, bias=False)
            self.k_norm = _norm(s.qk_norm, s.head_dim, bias=False)
        if isinstance(s.position, RelativeBias):
            self.relative_attention_bias = nn.Embedding(s.position.buckets, s.heads)
        # In a transformer stack absolute encodings are added once, at the stack's input.
        self.absolute = absolute_positions
        if absolute_positions and isinstance(s.position, Learned):
            self.position_embeddings = nn.Embedding(s.position.max_len, s.d_model)

    def forward(self, x: Tensor, memory: Tensor | None = None, key_lengths: Tensor | None = None,
                segment_ids: Tensor | None = None) -> Tensor:
        s = self.spec
        if self.absolute:
            x = add_absolute_position(self, s, x)
        kv_in = memory if s.kind == "cross" else x
        q = self.q_proj(x).unflatten(-1, (s.heads, s.head_dim)).transpose(1, 2)  # (B, H, L, d)
        k = self.k_proj(kv_in).unflatten(-1, (s.kv_heads, s.head_dim))
        k = k.transpose(1, 2)  # (B, Hkv, S, d)
        v = self.v_proj(kv_in).unflatten(-1, (s.kv_heads, s.value_dim))
        v = v.transpose(1, 2)  # (B, Hkv, S, dv)
        if s.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if isinstance(s.position, Rope):
            q = apply_rope(q, s.position)
            k = apply_rope(k, s.position)
        if s.groups > 1:
            k = k.repeat_interleave(s.groups, dim=1)  # (B, H, S, d): head h reads kv h // groups
            v = v.repeat_interleave(s.groups, dim=1)
        if isinstance(s.kernel, LinearKernel):
            out = linear_attention(q, k, v, s.kernel.feature, causal=s.mask == masks.Causal())
        else:
            out = self.softmax_attention(q, k, v, key_lengths, segment_ids)
        out = out.transpose(1, 2).flatten(2)  # (B, L, H * dv)
        return self.o_proj(out) if s.out_proj else out

    def softmax_attention(self, q: Tensor, k: Tensor, v: Tensor, key_lengths: Tensor | None,
                          segment_ids: Tensor | None) -> Tensor:
        s = self.spec
        L, S = q.shape[2], k.shape[2]
        qi = torch.arange(L, device=q.device).unsqueeze(1)  # (L, 1)
        ki = torch.arange(S, device=q.device).unsqueeze(0)  # (1, S)
        # lengths as 0-d tensors (the last index + 1): torch.onnx.export cannot lower
        # arithmetic between a tensor and a symbolic size such as `h % ceil(S / n)`
        visible = masks.evaluate(s.mask, qi, ki, L=qi[-1, 0] + 1, S=ki[0, -1] + 1,
                                 key_lengths=key_lengths,
                                 segment_ids=segment_ids)  # (L, S) or (B, L, S)
        if visible.dim() == 3:
            visible = visible.unsqueeze(1)  # (B, 1, L, S)
        bias = self.score_bias(qi, ki)  # (H, L, S) or None
        # scores and softmax in float32 whatever the model dtype (as fused kernels do); the
        # products of half-precision q and k are exact in float32
        scores = torch.matmul(q.float() * s.scale, k.float().transpose(-1, -2))  # (B, H, L, S)
        if bias is not None:
            scores = scores + bias
        if s.softcap is not None:
            scores = s.softcap * torch.tanh(scores / s.softcap)
        lowest = torch.finfo(scores.dtype).min
        scores = scores.masked_fill(~visible, lowest)
        probs = torch.softmax(scores, dim=-1)
        # A row with no visible key would be uniform over masked keys: make it zeros instead.
        probs = probs * visible.any(dim=-1, keepdim=True).to(probs.dtype)
        if self.training and s.dropout:
            probs = F.dropout(probs, p=s.dropout)
        return torch.matmul(probs.to(v.dtype), v)  # (B, H, L, dv)

    def score_bias(self, qi: Tensor, ki: Tensor) -> Tensor | None:
        """The float32 score bias of ALiBi or T5 relative positions, (H, L, S), or None."""
        s = self.spec
        if isinstance(s.position, Alibi):
            slopes = torch.tensor(alibi_slopes(s.heads), dtype=torch.float32, device=qi.device)
            distance = (qi - ki).abs().float()  # (L, S)
            return -slopes[:, None, None] * distance  # (H, L, S)
        if isinstance(s.position, RelativeBias):
            p = s.position
            bucket = t5_bucket_float32(torch, ki - qi, p.buckets, p.max_distance,
                                       p.bidirectional)  # (L, S)
            return self.relative_attention_bias(bucket).permute(2, 0, 1).float()  # (H, L, S)
        return None


def add_absolute_position(owner: nn.Module, spec: Attention, x: Tensor) -> Tensor:
    L = x.shape[1]
    if isinstance(spec.position, Sinusoidal):
        return x + sinusoidal_table(L, spec.d_model, x.dtype, x.device)
    if isinstance(spec.position, Learned):
        positions = torch.arange(L, device=x.device)
        return x + owner.position_embeddings(positions).to(x.dtype)  # (L, d_model)
    return x


def sinusoidal_table(L: int, d: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d))."""
    pos = torch.arange(L, device=device, dtype=torch.float32).unsqueeze(1)  # (L, 1)
    inv = torch.tensor([10000.0 ** (-(2 * i) / d) for i in range(d // 2)], device=device)
    angle = pos * inv  # (L, d/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).to(dtype)  # (L, d)


def apply_rope(x: Tensor, rope: Rope) -> Tensor:
    """Rotate the first rope.dim features of each head by position (0..len-1)."""
    n = x.shape[2]
    pos = torch.arange(n, device=x.device, dtype=torch.float32).unsqueeze(1)  # (n, 1)
    inv = torch.tensor(rope_inv_freq(rope.theta, rope.dim), device=x.device)
    angle = pos * inv  # (n, dim/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    rot, rest = x[..., : rope.dim], x[..., rope.dim:]
    if rope.interleaved:
        even, odd = rot[..., 0::2], rot[..., 1::2]
        rot = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
    else:
        half = rope.dim // 2
        x1, x2 = rot[..., :half], rot[..., half:]
        rot = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return torch.cat([rot, rest], dim=-1)


def feature_map(x: Tensor, feature: str) -> Tensor:
    if feature == "elu":
        return F.elu(x) + 1.0
    if feature == "relu":
        return F.relu(x)
    return torch.softmax(x, dim=-1)


def linear_attention(q: Tensor, k: Tensor, v: Tensor, feature: str, *, causal: bool) -> Tensor:
    """y_q = phi(q).sum_k phi(k) v_k^T / max(phi(q).sum_k phi(k), 1e-6); causal sums k <= q.
    Computed in float32 (the sums over keys overflow float16 at long lengths)."""
    dtype = v.dtype
    q, k, v = q.float(), k.float(), v.float()
    fq, fk = feature_map(q, feature), feature_map(k, feature)  # (B, H, L, d), (B, H, S, d)
    if causal:
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


class _Mlp(nn.Module):
    def __init__(self, d: int, ffn: Ffn):
        super().__init__()
        self.kind = ffn.kind
        if ffn.kind == "swiglu":
            self.gate_proj = nn.Linear(d, ffn.hidden, bias=False)
            self.up_proj = nn.Linear(d, ffn.hidden, bias=False)
            self.down_proj = nn.Linear(ffn.hidden, d, bias=False)
        else:
            self.fc1 = nn.Linear(d, ffn.hidden)
            self.fc2 = nn.Linear(ffn.hidden, d)

    def forward(self, x: Tensor) -> Tensor:
        if self.kind == "swiglu":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        h = self.fc1(x)
        if self.kind == "relu":
            return self.fc2(F.relu(h))
        approximate = "tanh" if self.kind == "gelu_tanh" else "none"
        if h.dtype == torch.bfloat16:  # in float32: the CUDA provider has no bfloat16 Gelu
            return self.fc2(F.gelu(h.float(), approximate=approximate).to(h.dtype))
        return self.fc2(F.gelu(h, approximate=approximate))


class _Block(nn.Module):
    def __init__(self, spec: Transformer):
        super().__init__()
        self.pre = spec.norm.placement == "pre"
        self.self_attn = AttentionModule(spec.attention, absolute_positions=False)
        self.attn_norm = _norm(spec.norm.kind, spec.d_model, bias=True)
        self.ffn_norm = _norm(spec.norm.kind, spec.d_model, bias=True)
        self.mlp = _Mlp(spec.d_model, spec.ffn)
        self.dropout = nn.Dropout(spec.dropout)

    def forward(self, x: Tensor, key_lengths: Tensor | None, segment_ids: Tensor | None) -> Tensor:
        if self.pre:
            h = x + self.dropout(self.self_attn(self.attn_norm(x), None, key_lengths, segment_ids))
            return h + self.dropout(self.mlp(self.ffn_norm(h)))
        h = self.attn_norm(x + self.dropout(self.self_attn(x, None, key_lengths, segment_ids)))
        return self.ffn_norm(h + self.dropout(self.mlp(h)))


class TransformerModule(nn.Module):
    """A stack: forward(x, [key_lengths], [segment_ids]) -> y. Pre-norm stacks end with `norm`."""

    def __init__(self, spec: Transformer):
        super().__init__()
        self.spec = spec
        if isinstance(spec.attention.position, Learned):
            self.position_embeddings = nn.Embedding(spec.attention.position.max_len,
                                                    spec.d_model)
        self.layers = nn.ModuleList(_Block(spec) for _ in range(spec.layers))
        if spec.norm.placement == "pre":
            self.norm = _norm(spec.norm.kind, spec.d_model, bias=True)

    def forward(self, x: Tensor, key_lengths: Tensor | None = None,
                segment_ids: Tensor | None = None) -> Tensor:
        x = add_absolute_position(self, self.spec.attention, x)
        for layer in self.layers:
            x = layer(x, key_lengths, segment_ids)
        return self.norm(x) if self.spec.norm.placement == "pre" else x



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
