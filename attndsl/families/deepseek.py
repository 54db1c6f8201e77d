"""DeepSeek-V3 (and Kimi K2, which shares its config), DeepSeek-V2 and Youtu-LLM (V3's attention,
every MLP dense): multi-head latent attention (a query bottleneck of q_lora_rank, keys and
values from a kv_lora_rank latent, a shared RoPE key of qk_rope_head_dim features, YaRN with its
softmax-scale correction), and a mixture of experts with a sigmoid router choosing by score
plus e_score_correction_bias among the topk_group best of n_group groups, renormalised, times
routed_scaling_factor, beside n_shared_experts shared experts; the first first_k_dense_replace
layers run a dense SwiGLU instead. DeepSeek-V2 differs in its router alone (a softmax, top-k
either greedy or among the topk_group groups with the best single expert, never renormalised)
and its always interleaved RoPE."""

from __future__ import annotations

import math

from .base import Family
from .llama import LLAMA
from .moe import ROUTER_INERT, expanded, mixture
from .names import Names
from .rope import num, rope
from .text import SpecText

__all__ = ["DEEPSEEK", "FAMILIES", "moe_ffn", "read_latent", "read_v3"]


def _softmax_scale(params: dict | None, head_dim: int) -> float:
    """head_dim ** -0.5, times mscale^2 with YaRN's mscale_all_dim (DeepSeek's
    yarn_apply_mscale: mscale = 0.1 * mscale_all_dim * ln(factor) + 1 for a factor above 1)."""
    scale = head_dim ** -0.5
    params = params or {}
    if params.get("rope_type", "default") != "default" and params.get("mscale_all_dim"):
        factor = params.get("factor", 1.0)
        if factor > 1:
            mscale = 0.1 * params["mscale_all_dim"] * math.log(factor) + 1.0
            scale *= mscale * mscale
    return scale


def read_latent(s: SpecText, padding: str | None, latent_eps: float | None = None,
                interleaved: bool = False) -> float:
    """The one attention (`deepseek_mla`) and layer pattern of a latent-attention config, and
    rms_norm_eps as read; `latent_eps`: the latent norms' eps where it is not rms_norm_eps
    (MiniCPM3's, transformers' RMSNorm default 1e-6); `interleaved`: its RoPE always
    interleaved (DeepSeek-V3.2's, which has no rope_interleave)."""
    cfg, v2 = s.cfg, s.cfg.get("model_type") == "deepseek_v2"
    heads, rope_dim = s.need("num_attention_heads"), s.need("qk_rope_head_dim")
    nope, eps = s.need("qk_nope_head_dim"), s.need("rms_norm_eps")
    if s.get("num_key_value_heads", default=heads) != heads:
        s.refuse("num_key_value_heads", "latent attention expands its keys and values for "
                                        "every head: it must equal num_attention_heads")
    head_dim = nope + rope_dim
    q_rank = cfg.get("q_lora_rank")
    entries = {"d_model": str(s.need("hidden_size")), "heads": str(heads),
               "head_dim": str(head_dim), "value_dim": str(s.need("v_head_dim")),
               "bias": "true" if cfg.get("attention_bias") else "false",
               "latent": (f"mla(q_rank = {q_rank if q_rank else 'none'}, kv_rank = "
                          f"{s.need('kv_lora_rank')}, rope_dim = {rope_dim}, eps = "
                          f"{num(eps if latent_eps is None else latent_eps)})"),
               "position": rope(s, cfg.get("rope_parameters"), head_dim, dim=rope_dim,
                                interleaved=interleaved or v2 or bool(cfg.get("rope_interleave")))}
    scale = _softmax_scale(cfg.get("rope_parameters"), head_dim)
    if scale != head_dim ** -0.5:
        entries["scale"] = num(scale)
    entries["mask"] = "causal" + ("" if padding is None else " & padding" if padding == "right"
                                  else " & padding(side = left)")
    s.attentions["deepseek_mla"] = entries
    s.comments["deepseek_mla"] = "multi-head latent attention"
    s.pattern = ["deepseek_mla"]
    return eps


def read_v3(s: SpecText, padding: str | None, interleaved: bool = False) -> None:
    """DeepSeek-V3's attention and stack (V2's, Youtu's); `interleaved` as `read_latent`."""
    # the latent norms (q_a_layernorm, kv_a_layernorm) are RMSNorms of transformers' default
    # eps 1e-6 in DeepSeek-V2/V3, Youtu and GLM-4.7-Flash alike, whatever rms_norm_eps says
    eps = read_latent(s, padding, latent_eps=1e-6, interleaved=interleaved)
    cfg, v2 = s.cfg, s.cfg.get("model_type") == "deepseek_v2"
    layers = s.need("num_hidden_layers")
    dense = s.need("intermediate_size")  # the dense layers' MLP (first_k_dense_replace)
    if s.get("hidden_act", default="silu") != "silu":
        s.refuse("hidden_act", "DeepSeek's MLPs and experts are SwiGLU (silu)")
    norm = f"rmsnorm(pre, eps = {num(eps)})"
    if cfg.get("model_type") == "youtu":  # Youtu-LLM: latent attention, every MLP dense
        s.stack = {"layers": str(layers), "ffn": f"swiglu({dense})", "norm": norm}
        return
    s.stack = {"layers": str(layers), "ffn": moe_ffn(s, v2), "norm": norm}


def moe_ffn(s: SpecText, v2: bool = False, extra: str = "") -> str:
    """The stack's `ffn` of a DeepSeek mixture (V3's sigmoid router with its selection bias
    and groups, or V2's softmax one), its first first_k_dense_replace layers (or those
    mlp_layer_types names `dense`, GLM-4.7-Flash's) dense SwiGLUs of intermediate_size; GLM-4.5
    (glm4_moe, glm4_moe_lite) routes as V3. `extra`: more of the mixture's arguments (A.X-K1's
    output norm)."""
    cfg, layers = s.cfg, s.need("num_hidden_layers")
    hidden, dense = s.need("moe_intermediate_size"), s.need("intermediate_size")
    ffn = (f"moe(experts = {s.need('n_routed_experts')}, top_k = "
           f"{s.need('num_experts_per_tok')}, expert = swiglu({hidden}), routed_scale = "
           f"{num(s.need('routed_scaling_factor'))}")
    if v2:  # a softmax, never renormalised; groups ranked by their best expert
        ffn += ", normalize = false"
        method = s.get("topk_method", default="greedy")
        if method not in ("greedy", "group_limited_greedy"):
            s.refuse("topk_method", "DeepSeek-V2's routers are greedy and group_limited_greedy")
        grouped = method == "group_limited_greedy"
    else:
        ffn += (f", router = sigmoid, normalize = "
                f"{'true' if cfg.get('norm_topk_prob') else 'false'}, selection_bias = true")
        grouped = True
    groups, top = s.get("n_group", default=1) or 1, s.get("topk_group", default=1) or 1
    if grouped and groups > 1:
        ffn += f", groups = {groups}, top_groups = {top}" + (", group_score = max" if v2 else "")
    if s.get("n_shared_experts", default=0):
        ffn += f", shared = swiglu({hidden * cfg['n_shared_experts']})"
    ffn += extra
    kinds = s.get("mlp_layer_types")
    if isinstance(kinds, list):
        if len(kinds) != layers or not set(kinds) <= {"dense", "sparse"}:
            s.refuse("mlp_layer_types", f"{layers} entries, each `dense` or `sparse`, are needed")
        return mixture(ffn, [i for i, k in enumerate(kinds) if k == "dense"], layers, dense)
    first = min(s.get("first_k_dense_replace", default=0), layers)
    return mixture(ffn, list(range(first)), layers, dense)

_ATTN = ("q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
DEEPSEEK = Names("layers.{i}.", {
    **{f"self_attn.{p}.{t}": f"self_attn.{p}.{t}" for p in _ATTN for t in ("weight", "bias")},
    **{f"self_attn.{n}.weight": f"self_attn.{n}.weight"
       for n in ("q_a_layernorm", "kv_a_layernorm")},
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    **{f"mlp.{p}.weight": f"mlp.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")},
    **{f"mlp.experts.{{e}}.{p}.weight": f"mlp.experts.{{e}}.{p}.weight"
       for p in ("gate_proj", "up_proj", "down_proj")},
    **{f"mlp.shared.{p}.weight": f"mlp.shared_experts.{p}.weight"
       for p in ("gate_proj", "up_proj", "down_proj")},
    "mlp.router.weight": "mlp.gate.weight",
    "mlp.router.selection_bias": "mlp.gate.e_score_correction_bias"},
    LLAMA.top, LLAMA.bases, past_layers=True)  # num_nextn_predict_layers: multi-token
# prediction, kept as layers past num_hidden_layers

_DEEPSEEK_V2 = Names(DEEPSEEK.layer, {k: v for k, v in DEEPSEEK.names.items()
                                       if k != "mlp.router.selection_bias"},
                     DEEPSEEK.top, DEEPSEEK.bases)

_YOUTU = Names(DEEPSEEK.layer, {k: v for k, v in DEEPSEEK.names.items()
                                  if not k.startswith(("mlp.experts.", "mlp.shared.",
                                                       "mlp.router."))},
               DEEPSEEK.top, DEEPSEEK.bases)

# transformers' defaults (DeepseekV3Config, DeepseekV2Config, YoutuConfig, 5.23) for the fields
# the import reads
FAMILIES = [
    Family("deepseek_v3", read_v3, DEEPSEEK, {
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
        "n_shared_experts": 1, "n_routed_experts": 256, "routed_scaling_factor": 2.5,
        "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "norm_topk_prob": True, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "rope_interleave": True,
        "attention_bias": False},
        inert={**ROUTER_INERT,
               "num_nextn_predict_layers": "multi-token prediction layers, for training and "
                                           "speculative decoding, not in the model's forward",
               "head_dim": "DeepseekV3Config sets it to qk_rope_head_dim",
               "qk_head_dim": "derived: qk_nope_head_dim + qk_rope_head_dim",
               "pretraining_tp": "transformers' DeepSeek-V3 forward does not read it"},
        lm=True, weights_for=expanded(DEEPSEEK)),
    Family("deepseek_v2", read_v3, _DEEPSEEK_V2, {
        "hidden_size": 4096, "intermediate_size": 11008, "moe_intermediate_size": 1407,
        "num_hidden_layers": 32, "num_attention_heads": 32, "n_shared_experts": 2,
        "n_routed_experts": 64, "routed_scaling_factor": 1.0, "kv_lora_rank": 512,
        "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "qk_nope_head_dim": 128, "first_k_dense_replace": 0, "topk_method": "greedy",
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "norm_topk_prob": False},
        inert={**ROUTER_INERT,
               "norm_topk_prob": "transformers' DeepSeek-V2 router never renormalises",
               "head_dim": "DeepseekV2Config sets it to qk_rope_head_dim",
               "qk_head_dim": "derived: qk_nope_head_dim + qk_rope_head_dim",
               "pretraining_tp": "transformers' DeepSeek-V2 forward does not read it"},
        refused={"mlp_bias": (bool, "DeepSeek-V2's MLPs with biases have no import yet")},
        lm=True, weights_for=expanded(_DEEPSEEK_V2)),
    # GLM-4.7-Flash: DeepSeek-V3's attention and routing, its dense layers in mlp_layer_types
    Family("glm4_moe_lite", read_v3, DEEPSEEK, {
        "hidden_size": 2048, "intermediate_size": 10240, "moe_intermediate_size": 1536,
        "num_hidden_layers": 47, "num_attention_heads": 20, "num_key_value_heads": 20,
        "n_shared_experts": 1, "n_routed_experts": 64, "routed_scaling_factor": 1.8,
        "kv_lora_rank": 512, "q_lora_rank": 768, "qk_rope_head_dim": 64, "v_head_dim": 256,
        "qk_nope_head_dim": 192, "n_group": 1, "topk_group": 1, "num_experts_per_tok": 4,
        "norm_topk_prob": True, "hidden_act": "silu", "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False, "rope_interleave": True, "attention_bias": False},
        inert={**ROUTER_INERT,
               "num_nextn_predict_layers": "multi-token prediction layers, for training and "
                                           "speculative decoding, not in the model's forward",
               "head_dim": "Glm4MoeLiteConfig reads it as qk_rope_head_dim",
               "qk_head_dim": "derived: qk_nope_head_dim + qk_rope_head_dim"},
        lm=True, weights_for=expanded(DEEPSEEK)),
    # Youtu-LLM: DeepSeek-V3's latent attention in Llama's decoder, every MLP a dense SwiGLU
    Family("youtu", read_v3, _YOUTU, {
        "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 32,
        "num_attention_heads": 16, "num_key_value_heads": 16, "kv_lora_rank": 512,
        "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
        "hidden_act": "silu", "rms_norm_eps": 1e-06, "tie_word_embeddings": True,
        "rope_interleave": True, "attention_bias": False},
        inert={"head_dim": "YoutuConfig sets it to qk_rope_head_dim",
               "qk_head_dim": "derived: qk_nope_head_dim + qk_rope_head_dim",
               "embedding_initializer_range": "how untrained embeddings are drawn; a checkpoint "
                                              "brings its own"}, lm=True),
]
