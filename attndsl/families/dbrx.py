"""DBRX as transformers runs it: pre-norm blocks with LayerNorms without bias (eps 1e-5,
nn.LayerNorm's), a fused Wqkv (q rows, then the kv_n_heads' k rows and v rows) clamped to
[-c, c] by attn_config's clip_qkv, RoPE, and a mixture of experts for every MLP: a softmax
router (`ffn.router.layer`, no bias) whose top k probabilities are divided by their p-norm,
p = ffn_config's moe_normalize_expert_weights (p = 1 is `normalize = true`, None leaves them;
other p are refused), over gated experts stored packed as [E n, d] tensors: w1 (gate), v1 (up)
and w2 (down, transposed). The sub-configs' fields are read here, each read, inert or refused
by name."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .moe import ROUTER_INERT, expanded
from .mpt import GENERIC
from .names import Names, Split, rows
from .rope import num, rope
from .text import SpecText, mask

__all__ = ["FAMILIES"]

# DbrxAttentionConfig's and DbrxFFNConfig's defaults (5.23); attn_config's rope_theta is
# stored, not read, by transformers' DBRX
_ATTN = {"attn_pdrop": 0.0, "clip_qkv": None, "kv_n_heads": 1, "rope_theta": None}
_FFN = {"ffn_act_fn": {"name": "silu"}, "ffn_hidden_size": 3584, "moe_num_experts": 4,
        "moe_top_k": 1, "moe_jitter_eps": None, "moe_loss_weight": 0.01,
        "moe_normalize_expert_weights": 1.0, "hidden_size": None}
# gated units by the activation ffn_act_fn names (ACT2FN's): SiLU's and tanh-GELU's
_UNITS = {"silu": "swiglu", "swish": "swiglu", "gelu_pytorch_tanh": "geglu",
          "gelu_new": "geglu", "gelu_fast": "geglu"}


def _sub(s: SpecText | None, cfg: dict, key: str, defaults: dict) -> dict:
    """The sub-config `key` of `cfg`, its defaults filled in; a field it does not know is a
    problem of `s` (none recorded without one)."""
    given = cfg.get(key)
    out = {**defaults, **(given if isinstance(given, dict) else {})}
    unknown = [k for k in out if k not in (*defaults, *GENERIC)]
    if s is not None and unknown:
        s.problems.append(f"`{key}` has fields attndsl does not know: {', '.join(unknown)}")
    return out


def _read(s: SpecText, padding: str | None) -> None:
    d, heads = s.need("d_model"), s.need("n_heads")
    head_dim = d // max(heads, 1)
    attn, ffn = _sub(s, s.cfg, "attn_config", _ATTN), _sub(s, s.cfg, "ffn_config", _FFN)
    entries = {"d_model": str(d), "heads": str(heads), "kv_heads": str(attn["kv_n_heads"]),
               "head_dim": str(head_dim), "bias": "false"}
    params = s.get("rope_parameters")
    theta = (params or {}).get("rope_theta", 10000.0)
    if attn["rope_theta"] is not None and attn["rope_theta"] != theta:
        s.problems.append(f"`attn_config.rope_theta` = {attn['rope_theta']!r}: transformers' "
                          f"DBRX rotates by rope_parameters' theta ({theta!r}) whatever it "
                          "says: set rope_parameters' rope_theta to the model's")
    entries["position"] = rope(s, params, head_dim)
    clip = attn["clip_qkv"]  # transformers clamps Wqkv's output where it is not None
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int | float)
                             or clip <= 0):
        s.problems.append(f"`attn_config.clip_qkv` = {clip!r}: a clamp of the projected q, k "
                          "and v to [-c, c] needs a number c > 0")
    elif clip is not None:
        entries["clip_qkv"] = num(clip)
    entries["mask"] = mask(True, padding)
    s.attentions["dbrx_attn"] = entries
    s.pattern = ["dbrx_attn"]
    act = ffn["ffn_act_fn"] if isinstance(ffn["ffn_act_fn"], dict) else {}
    unit = _UNITS.get(act.get("name", "silu"))
    if unit is None or set(act) - {"name"}:
        s.problems.append(f"`ffn_config.ffn_act_fn` = {ffn['ffn_act_fn']!r}: the experts' "
                          f"gate is one of {', '.join(_UNITS)}, named alone")
        unit = "swiglu"
    p = ffn["moe_normalize_expert_weights"]
    if p is not None and p != 1:
        s.problems.append(f"`ffn_config.moe_normalize_expert_weights` = {p!r}: the experts' "
                          "weights divided by their p-norm; attndsl renormalises by their sum "
                          "(p = 1) or not at all (null)")
    s.stack = {"layers": str(s.need("n_layers")),
               "ffn": f"moe(experts = {ffn['moe_num_experts']}, top_k = {ffn['moe_top_k']}, "
                      f"expert = {unit}({ffn['ffn_hidden_size']}), normalize = "
                      f"{'false' if p is None else 'true'})",
               "norm": "layernorm(pre, eps = 1e-05, bias = false)"}


def _expert(name: str, down: bool):
    """Expert e's rows e n .. (e + 1) n of a packed [E n, d] tensor (n: ffn_hidden_size),
    transposed to [d, n] for w2 (`down`)."""
    def make(e: int) -> Split:
        def split(t: Any, a: Attention, cfg: dict) -> Any:
            n = _sub(None, cfg, "ffn_config", _FFN)["ffn_hidden_size"]
            part = t[e * n:(e + 1) * n]
            return part.T if down else part
        return split
    return (f"ffn.experts.mlp.{name}", make)


def _q(a: Attention, cfg: dict) -> int:
    return a.heads * a.head_dim


def _kv(a: Attention, cfg: dict) -> int:
    return a.kv_heads * a.head_dim


_W = "norm_attn_norm.attn.Wqkv.weight"
_DBRX = Names("blocks.{i}.", {
    "self_attn.q_proj.weight": (_W, rows(lambda a, c: 0, _q)),
    "self_attn.k_proj.weight": (_W, rows(_q, _kv)),
    "self_attn.v_proj.weight": (_W, rows(lambda a, c: _q(a, c) + _kv(a, c), _kv)),
    "self_attn.o_proj.weight": "norm_attn_norm.attn.out_proj.weight",
    "attn_norm.weight": "norm_attn_norm.norm_1.weight",
    "ffn_norm.weight": "norm_attn_norm.norm_2.weight",
    "mlp.router.weight": "ffn.router.layer.weight",
    "mlp.experts.{e}.gate_proj.weight": _expert("w1", False),
    "mlp.experts.{e}.up_proj.weight": _expert("v1", False),
    "mlp.experts.{e}.down_proj.weight": _expert("w2", True)},
    {"norm.weight": "norm_f.weight", "embed_tokens.weight": "wte.weight",
     "lm_head.weight": "lm_head.weight"}, ("transformer.",))


def _names(cfg: dict) -> Names:
    """The table with its experts 0 .. ffn_config's moe_num_experts - 1."""
    experts = _sub(None, cfg, "ffn_config", _FFN)["moe_num_experts"]
    return expanded(_DBRX)({**cfg, "num_local_experts": experts})


# transformers' defaults (DbrxConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("dbrx", _read, _DBRX, {
        "d_model": 2048, "n_heads": 16, "n_layers": 24, "tie_word_embeddings": False},
        inert={**ROUTER_INERT,
               "max_seq_len": "the longest sequence trained on: RoPE is computed at any "
                              "position",
               "emb_pdrop": "dropout, which is off at inference",
               "num_key_value_heads": "DbrxConfig's copy of attn_config's kv_n_heads, which "
                                      "the import reads"},
        lm=True, weights_for=_names),
]
