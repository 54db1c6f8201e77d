"""The NumPy reference: a plain float64 interpreter of the graph IR, one small function per op.
It is the definition of meaning; every other backend is tested against it. Clarity over speed.

It is a second, independent reading of docs/LANGUAGE.md, sharing no helper with the backends,
so a mistake in the shared backend code cannot hide from it."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ..ir import Graph, Node, Op
from .reference_decoding import (
    FIRST,
    cache,
    call_positions,
    head_linear,
    rows,
    seen_keys,
    tail,
)
from .reference_delta import causal_conv
from .reference_experts import act, experts, glu, route, xielu
from .reference_indexer import select_keys
from .reference_kernels import kernel
from .reference_masks import mask_of
from .reference_mechanisms import READINGS
from .reference_positions import add_bias, axial_angles, mrope_stream_of, rope_frequencies
from .reference_vision import grid_of, patch_rows

__all__ = ["run", "run_all"]

Env = dict[str, np.ndarray]
_STACK = "#stack"  # in env: the graph is a stack
_IMPL: dict[Op, Callable[[Node, Env, Mapping[str, np.ndarray]], np.ndarray]] = {}


def impl(op: Op) -> Callable:
    def register(fn: Callable) -> Callable:
        _IMPL[op] = fn
        return fn
    return register


def run(graph: Graph, inputs: Mapping[str, np.ndarray],
        weights: Mapping[str, np.ndarray]) -> np.ndarray:
    """Evaluate the graph in float64 (integer inputs stay int64): its output."""
    return _evaluate(graph, inputs, weights)[graph.output]


def run_all(graph: Graph, inputs: Mapping[str, np.ndarray],
            weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of the graph by its name: the output (`graph.output_name`: y or logits)
    and a decoding graph's presents (present.{i}.key, ...), the next call's pasts."""
    env = _evaluate(graph, inputs, weights)
    return {graph.output_name: env[graph.output]} | {p: env[p] for p in graph.presents}


def _evaluate(graph: Graph, inputs: Mapping[str, np.ndarray],
              weights: Mapping[str, np.ndarray]) -> Env:
    env: Env = {}
    w = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
    if graph.kind == "transformer":  # its RoPE is its self attentions' (a decoder's cross
        env[_STACK] = np.True_  # attention takes no positions): keys counted are tokens
    for node in graph.nodes:  # a bounded cache's first positions kept, for the mask over it
        if node.op is Op.TAIL:
            env[node.args[0] + FIRST] = np.int64(node.attr("first"))
    for node in graph.nodes:
        if node.op is Op.INPUT:
            value = np.asarray(inputs[node.out])
            env[node.out] = value.astype(np.float64 if value.dtype.kind == "f" else np.int64)
            continue
        env[node.out] = _IMPL[node.op](node, env, w)
    return env


def _arg(node: Node, env: Env, i: int = 0) -> np.ndarray:
    return env[node.args[i]]


def _positions(node: Node, env: Env, n: int) -> np.ndarray:
    """(B | 1, n): the tokens' positions, 0 .. n - 1, or a decoding call's position_ids
    (the node's second argument)."""
    return _arg(node, env, 1) if len(node.args) > 1 else np.arange(n)[None]


@impl(Op.EMBED)
def _embed(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Row t of the token embedding table for token id t, times embedding_scale."""
    return w[node.attr("weight")][_arg(node, env)] * node.attr("scale")


# a vision stack's rows and each token's place in its grid (reference_vision)
_IMPL[Op.PATCHES] = lambda node, env, w: patch_rows(_arg(node, env), dict(node.attrs), w)
_IMPL[Op.GRID] = lambda node, env, w: grid_of(_arg(node, env), **dict(node.attrs))


@impl(Op.ADD_POSITION)
def _add_position(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    x = _arg(node, env)
    d = x.shape[2]
    pos = _positions(node, env, x.shape[1])  # (B | 1, L)
    if node.attr("kind") == "learned":
        table = w[node.attr("weight")]
        if table.shape[0] <= pos.max():
            raise ValueError(f"position {pos.max()} exceeds learned positions "
                             f"({table.shape[0]})")
        return x + table[pos]
    attrs = dict(node.attrs)  # the variant's, where not the default
    halves = attrs.get("layout") == "halves"
    p = pos + attrs.get("offset", 0)
    pe = np.zeros((*pos.shape, d))
    for i in range(d // 2):
        if attrs.get("frequencies") == "tensor2tensor":
            angle = p * np.exp(-i * np.log(10000.0) / (d // 2 - 1))
        else:
            angle = p / 10000.0 ** (2 * i / d)
        pe[..., i if halves else 2 * i] = np.sin(angle)
        pe[..., d // 2 + i if halves else 2 * i + 1] = np.cos(angle)
    return x + pe


@impl(Op.LINEAR)
def _linear(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    y = _arg(node, env) @ w[node.attr("weight")].T
    bias = node.attr("bias")
    return y + w[bias] if bias else y


@impl(Op.SPLIT_HEADS)
def _split_heads(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    x = _arg(node, env)
    B, n, _ = x.shape
    return x.reshape(B, n, node.attr("heads"), node.attr("dim")).transpose(0, 2, 1, 3)


@impl(Op.HEAD_SLICE)
def _head_slice(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Columns start .. stop - 1 of each head's block of the last axis (of (B, n, h*w))."""
    x = _arg(node, env)
    *lead, width = x.shape
    heads = node.attr("heads")
    parts = x.reshape(*lead, heads, width // heads)[..., node.attr("start"):node.attr("stop")]
    return parts.reshape(*lead, -1)


@impl(Op.JOIN_HEADS)
def _join_heads(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Each head's features, then the second's (one head of it shared by every head)."""
    a, c = _arg(node, env, 0), _arg(node, env, 1)
    return np.concatenate([a, np.broadcast_to(c, (*a.shape[:3], c.shape[-1]))], axis=-1)


@impl(Op.NORM)
def _norm(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    x = _arg(node, env)
    module, eps = node.attr("module"), node.attr("eps")
    if node.attr("kind") == "l2norm":
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    if node.attr("kind") == "rmsnorm":
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
        if not dict(node.attrs).get("affine", True):  # no weight (NanoChat's)
            return y
        return y * (w[f"{module}.weight"] + (1.0 if node.attr("unit_offset") else 0.0))
    centered = x - x.mean(-1, keepdims=True)
    y = centered / np.sqrt((centered**2).mean(-1, keepdims=True) + eps)
    if not dict(node.attrs).get("affine", True):  # no weight, no bias
        return y
    y = y * (w[f"{module}.weight"] + (1.0 if node.attr("unit_offset") else 0.0))
    return y + w[f"{module}.bias"] if node.attr("bias") else y


@impl(Op.APPLY)
def _apply(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """A mechanism's transform, read from docs/LANGUAGE.md by the oracle's own module."""
    pos = env[node.args[1]] if len(node.args) > 1 else None  # a decoding call's position_ids
    return READINGS[node.attr("mechanism")](_arg(node, env), dict(node.attrs[1:]), w, pos)


@impl(Op.ROPE)
def _rope(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    x = _arg(node, env)  # (B, h, n, d)
    dim = node.attr("dim")
    S = (env["attention_mask"].shape[1] if "attention_mask" in env else  # keys counted
         env["memory"].shape[1] if "memory" in env and _STACK not in env else env["x"].shape[1])
    inv_freq, gain = rope_frequencies(node.attr("theta"), dim, node.attr("scaling"), S)
    pos = _positions(node, env, x.shape[2])  # (B | 1, n); multimodal: (3, B, n)
    sections = dict(node.attrs).get("mrope")
    if dict(node.attrs).get("axial"):  # a token's row and column (docs/LANGUAGE.md, axial)
        angle = axial_angles(pos, node.attr("theta"), dim)
    elif sections is None:
        angle = pos[..., None] * inv_freq  # (B | 1, n, dim/2)
    else:  # frequency i turns by the position of its stream (docs/LANGUAGE.md, mrope)
        streams = mrope_stream_of(sections, node.attr("mrope_interleaved"), dim // 2)
        angle = np.stack([pos[streams[i]] * inv_freq[i] for i in range(dim // 2)], axis=-1)
    cos, sin = gain * np.cos(angle)[:, None], gain * np.sin(angle)[:, None]  # over heads
    out = x.copy()
    for i in range(dim // 2):  # pair i: (2i, 2i+1) in GPT-J's layout, (i, i + dim/2) else
        a, b = (2 * i, 2 * i + 1) if node.attr("interleaved") else (i, i + dim // 2)
        out[..., a] = x[..., a] * cos[..., i] - x[..., b] * sin[..., i]
        out[..., b] = x[..., b] * cos[..., i] + x[..., a] * sin[..., i]
    return out


@impl(Op.REPEAT_KV)
def _repeat_kv(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.repeat(_arg(node, env), node.attr("groups"), axis=1)


@impl(Op.SCORES)
def _scores(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    q, k = _arg(node, env, 0), _arg(node, env, 1)
    return node.attr("scale") * (q @ k.transpose(0, 1, 3, 2))


@impl(Op.SCORE_BIAS)
def _score_bias(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    return _biased(_arg(node, env), node, env, w)


def _biased(s: np.ndarray, node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Scores s (B, H, L, S) plus the node's score bias, at a decoding call's positions."""
    kind = node.attr("kind" if node.op is Op.SCORE_BIAS else "bias")  # a core's: `bias`
    # relative logits' relative states or an indexer's selection: a score_bias node's second
    # operand, a core's fourth
    states = env[node.args[1 if node.op is Op.SCORE_BIAS else 3]] \
        if kind in ("relative_logits", "indexed", "relative_2d") else None
    if "attention_mask" in env:  # a decoding call: the tokens' and the keys' positions
        q, k = call_positions(env["attention_mask"], s.shape[2], s.shape[3])
        return add_bias(s, kind, dict(node.attrs), w, q[:, :, None], k[:, None, :], states)
    return add_bias(s, kind, dict(node.attrs), w, states=states)


@impl(Op.MASK)
def _mask(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Visibility (B, L, S); a decoding call's (its attention_mask, or memory rows, first)
    over its cached and new keys (`reference_decoding.decoding_visible`)."""
    keys = node.shape.dims[-1]  # the keys' length symbol: S (memory rows) or L (tokens)
    return seen_keys(node, node.args, env, env["memory"].shape[1] if keys == "S"
                    else env["x"].shape[1])


@impl(Op.SOFTMAX)
def _softmax(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    s = _arg(node, env, 0)
    if len(node.args) == 1:  # no mask (Linformer's rows)
        visible = np.ones((s.shape[0], *s.shape[2:]), bool)
    else:
        visible = _arg(node, env, 1)
    return _masked_softmax(s, visible, _sinks(node, w))


def _sinks(node: Node, w: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """A softmax's learned sink logits (heads,), or None."""
    name = node.attr("sinks")
    return None if name is None else np.asarray(w[name], np.float64)


@impl(Op.SWITCH)
def _switch(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """by_length: the first variant whose up_to holds the query length L, else the last."""
    L = env["x"].shape[1]
    bounds = node.attr("up_to")
    i = next((i for i, n in enumerate(bounds) if n >= L), len(bounds))
    for n in node.attr("branches")[i]:
        env[n.out] = _IMPL[n.op](n, env, w)
    return env[node.attr("outputs")[i]]


@impl(Op.SEQ_PROJECT)
def _seq_project(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Linformer: the keys (or values) the mask hides are zeroed, then E[..., :n] @ keys: k
    rows per head, each a weighted sum of the n keys."""
    t = _arg(node, env)  # (B, h, n, d)
    B, n = t.shape[0], t.shape[2]
    if n > node.attr("max_len"):
        raise ValueError(f"{n} keys exceed Linformer's max_len ({node.attr('max_len')})")
    e = w[node.attr("weight")][..., :n]  # (k, n) or (h, k, n)
    kept = mask_of(node.attr("expr"), B, 1, n, env.get("key_lengths"), None)  # (B|1, 1, n)
    kept = np.broadcast_to(kept, (B, 1, n))[:, :, :, None]  # (B, 1, n, 1): over heads
    return e @ np.where(kept, t, 0.0)


def _masked_softmax(s: np.ndarray, visible: np.ndarray, sinks: np.ndarray | None = None,
                    ) -> np.ndarray:
    """Softmax over the visible keys, rows with none -> zeros. With `sinks`: p[b, h, q, k] =
    exp(s[b, h, q, k]) / (sum over visible k' of exp(s[b, h, q, k']) + exp(sinks[h])) at
    visible keys, 0 elsewhere: head h's sink logit joins the denominator and is dropped from
    the weights (docs/LANGUAGE.md, `sinks`)."""
    visible = np.broadcast_to(visible[:, None], s.shape)  # (B, 1, L, S) -> (B, H, L, S)
    masked = np.where(visible, s, -np.inf)
    if sinks is not None:
        sink = sinks[None, :, None, None]  # (1, H, 1, 1)
        top = np.maximum(masked.max(-1, keepdims=True), sink)
        e = np.exp(masked - top)  # 0 at hidden keys
        return e / (e.sum(-1, keepdims=True) + np.exp(sink - top))
    top = masked.max(-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)  # rows with no visible key
    e = np.where(visible, np.exp(masked - top), 0.0)
    total = e.sum(-1, keepdims=True)
    return e / np.where(total > 0, total, 1.0)


@impl(Op.ATTEND)
def _attend(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    return _arg(node, env, 0) @ _arg(node, env, 1)


_IMPL.update({Op.CACHE: cache, Op.TAIL: tail, Op.ROWS: rows, Op.HEAD_LINEAR: head_linear,
              Op.CAUSAL_CONV: causal_conv, Op.KERNEL: kernel, Op.SELECT_KEYS: select_keys})


@impl(Op.MERGE_HEADS)
def _merge_heads(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    x = _arg(node, env)
    B, H, L, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, L, H * d)


@impl(Op.ACTIVATION)
def _activation(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    return act(_arg(node, env), node.attr("kind"))


@impl(Op.CLAMPED_GLU)
def _clampedglu(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    return glu(_arg(node, env, 0), _arg(node, env, 1), node.attr("alpha"), node.attr("limit"))


@impl(Op.MUL)
def _mul(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    return _arg(node, env, 0) * _arg(node, env, 1)


@impl(Op.ADD)
def _add(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    return _arg(node, env, 0) + _arg(node, env, 1)


@impl(Op.VALUE_PAIRS)
def _value_pairs(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Kv head j's values beside those of kv head (j mod Hkv/2) + Hkv/2, for j < Hkv/2;
    for j >= Hkv/2, those of j - Hkv/2 then its own (docs/LANGUAGE.md, differential)."""
    v = _arg(node, env)
    half = v.shape[1] // 2
    out = []
    for j in range(v.shape[1]):
        low = j % half
        out.append(np.concatenate([v[:, low], v[:, low + half]], axis=-1))
    return np.stack(out, axis=1)


@impl(Op.FFN)
def _ffn(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """A feed-forward form's node, read here on its own: the xIELU activation of an xielu
    MLP's units; a mixture of experts, the router's gates, then each token's experts."""
    if node.attr("ffn") == "xielu":
        alpha_p, alpha_n = (w[name] for name in node.attr("weights"))
        return xielu(_arg(node, env), alpha_p, alpha_n, node.attr("beta"), node.attr("eps"))
    if node.attr("ffn") != "moe":
        raise NotImplementedError(f"no reading of the feed-forward form {node.attr('ffn')!r}")
    x, router = _arg(node, env), node.attr("weights")
    gates = route(x, w[router[0]], w[router[1]] if node.attr("router_bias") else None,
                  node.attr("top_k"), node.attr("router"), node.attr("normalize"),
                  node.attr("scale"), w[router[-1]] if node.attr("selection_bias") else None,
                  node.attr("groups"), node.attr("top_groups"), node.attr("group_score"),
                  node.attr("threshold"), node.attr("select_by"), node.attr("sink_experts"))
    attrs = ("experts", "prefix", "gated", "bias", "gate", "alpha", "limit")
    y = experts(x, gates, w, unit=node.attr("act"), **{k: node.attr(k) for k in attrs})
    y = y + x * gates[..., node.attr("experts"):].sum(-1, keepdims=True)  # identity experts
    return y if node.attr("output_bias") is None else y + w[node.attr("output_bias")]


@impl(Op.SCALE)
def _scale(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """x times the factor, and times the weight (one number: Gemma 4's layer_scalar) if any."""
    weight = dict(node.attrs).get("weight")
    y = _arg(node, env) * node.attr("factor")
    return y if weight is None else y * w[weight]


@impl(Op.ATTENTION)
def _attention(node: Node, env: Env, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """An attention core, planned or not: the same meaning whatever its strategy."""
    q, k, v = (_arg(node, env, i) for i in range(3))  # (B, H, L, d), (B, Hkv, S, d), ...
    groups = node.attr("heads") // node.attr("kv_heads")
    k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    s = node.attr("scale") * (q @ k.transpose(0, 1, 3, 2))
    if node.attr("bias"):
        s = _biased(s, node, env, w)
    cap = node.attr("softcap")
    if cap:
        s = cap * np.tanh(s / cap)
    seen = (np.ones((s.shape[0], *s.shape[2:]), bool) if node.attr("expr") is None
            else seen_keys(node, node.args[3 + (node.attr("bias") == "relative_logits"):], env,
                          k.shape[2]))
    o = _masked_softmax(s, seen, _sinks(node, w)) @ v  # (B, H, L, dv)
    B, H, L, dv = o.shape
    return o.transpose(0, 2, 1, 3).reshape(B, L, H * dv)
