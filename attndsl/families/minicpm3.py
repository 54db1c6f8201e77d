"""MiniCPM3: DeepSeek-V2's latent attention (a query bottleneck of q_lora_rank, keys and values
from a kv_lora_rank latent, a shared RoPE key of qk_rope_head_dim features) with rotate-half
RoPE, its latent norms at RMSNorm's default eps (1e-6, whatever rms_norm_eps says), a dense
gated MLP in every layer, and MiniCPM's muP scales: the embeddings times scale_emb, each
sublayer's output times scale_depth / sqrt(num_hidden_layers) before the residual, and the
final hidden states divided by hidden_size / dim_model_base before the LM head."""

from __future__ import annotations

from .base import Family
from .deepseek import DEEPSEEK, read_latent
from .names import GATED, Names
from .rope import num
from .text import SpecText, act

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    if s.cfg.get("v_head_dim") is None:  # as MiniCPM3Config derives it
        s.cfg["v_head_dim"] = s.need("hidden_size") // max(s.need("num_attention_heads"), 1)
    eps = read_latent(s, padding, latent_eps=1e-6)  # MiniCPM3RMSNorm(rank): eps 1e-6
    entries = s.attentions["deepseek_mla"]
    if s.cfg.get("attention_bias") and not s.cfg.get("q_lora_rank"):
        entries["bias"] = "[k, o]"  # q_proj never has a bias; kv_a_proj_with_mqa and o_proj do
    layers, hidden = s.need("num_hidden_layers"), s.need("intermediate_size")
    gate = act(s, "hidden_act", s.need("hidden_act"), gated=True)
    ffn = f"{'swiglu' if gate == 'silu' else 'geglu'}({hidden}"
    s.stack = {"layers": str(layers),
               "ffn": ffn + (", bias = true)" if s.cfg.get("mlp_bias") else ")"),
               "norm": f"rmsnorm(pre, eps = {num(eps)})"}
    # MiniCPM3Config: scale_depth null is sqrt(layers) (no scale), dim_model_base null is
    # hidden_size (none)
    depth = s.get("scale_depth")
    if depth is not None and layers and depth ** 2 != layers:
        s.stack["residual_scale"] = f"{num(depth)} / sqrt({layers})"
    if (embedding := s.need("scale_emb")) not in (0, 1):
        s.head["embedding_scale"] = num(embedding)
    base, d = s.get("dim_model_base"), s.need("hidden_size")
    if base is not None and base != d:
        s.head["logit_scale"] = f"{num(base)} / {d}"


_MINICPM3 = Names(DEEPSEEK.layer, {
    **{k: v for k, v in DEEPSEEK.names.items() if not k.startswith("mlp.")}, **GATED},
    DEEPSEEK.top, DEEPSEEK.bases)

# transformers' defaults (MiniCPM3Config, 5.23) for the fields the import reads
FAMILIES = [
    Family("minicpm3", _read, _MINICPM3, {
        "hidden_size": 2560, "intermediate_size": 6400, "num_hidden_layers": 62,
        "num_attention_heads": 40, "num_key_value_heads": 40, "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "attention_bias": False,
        "mlp_bias": False, "kv_lora_rank": 256, "q_lora_rank": 768, "qk_nope_head_dim": 64,
        "qk_rope_head_dim": 32, "scale_emb": 12, "scale_depth": 1.4, "dim_model_base": 256},
        inert={"head_dim": "MiniCPM3Config sets it to qk_rope_head_dim",
               "qk_head_dim": "derived: qk_nope_head_dim + qk_rope_head_dim",
               "pretraining_tp": "transformers' MiniCPM3 forward does not read it"},
        lm=True),
]
