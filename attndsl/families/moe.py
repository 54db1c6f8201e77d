"""The mixture-of-experts decoders built on Llama: Mixtral (8 SwiGLU experts w1, w3, w2 under
`block_sparse_moe`, top 2 renormalised), Qwen3-MoE (`mlp.experts`, q/k RMSNorm, top k
renormalised with norm_topk_prob) and Qwen2-MoE (Qwen2's q/k/v biases, and a shared expert
scaled per token by the sigmoid of `shared_expert_gate`): `ffn = moe(...)`, with Qwen's
dense layers (mlp_only_layers, decoder_sparse_step) among them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .base import Family
from .llama import LLAMA
from .llama import read as read_llama
from .names import Names
from .rope import num
from .text import SpecText

__all__ = ["FAMILIES", "ROUTER_INERT", "expanded", "grouped_sigmoid", "layer_kinds",
           "mixture"]


def _read(s: SpecText, padding: str | None) -> None:
    read_llama(s, padding)
    cfg, mixtral = s.cfg, s.cfg.get("model_type") == "mixtral"
    experts = s.need("num_local_experts", "num_experts")  # Qwen3MoeConfig saves the former
    hidden = s.need("intermediate_size" if mixtral else "moe_intermediate_size")
    normalize = "true" if mixtral or cfg.get("norm_topk_prob") else "false"
    ffn = (f"moe(experts = {experts}, top_k = {s.need('num_experts_per_tok')}, "
           f"expert = swiglu({hidden}), normalize = {normalize}")
    if cfg.get("model_type") == "qwen2_moe":
        for entries in s.attentions.values():
            entries["bias"] = "[q, k, v]" if s.need("qkv_bias") else "false"
        ffn += (f", shared = swiglu({s.need('shared_expert_intermediate_size')}), "
                "shared_gate = true")
    layers = s.need("num_hidden_layers")
    # Qwen3-MoE: layer i is a mixture unless listed in mlp_only_layers or (i + 1) is not a
    # multiple of decoder_sparse_step; those run a dense MLP of intermediate_size
    only = [] if mixtral else (s.get("mlp_only_layers") or [])
    step = 1 if mixtral else s.get("decoder_sparse_step", default=1)
    dense = [i for i in range(layers) if i in only or (i + 1) % step != 0]
    s.stack["ffn"] = mixture(ffn, dense, layers, s.need("intermediate_size"))


def mixture(moe: str, dense: list[int], layers: int, width: int) -> str:
    """The stack's `ffn`: `moe` (an unclosed `moe(...` call) closed, with the blocks in
    `dense` running `swiglu(width)` instead; that MLP alone when every block is dense."""
    if len(dense) == layers:
        return f"swiglu({width})"
    return f"{moe}, dense = swiglu({width}), dense_layers = {dense})" if dense else moe + ")"


def grouped_sigmoid(s: SpecText, experts: str, shared: str, expert: str, hidden: int,
                    bias: str = "") -> str:
    """DeepSeek-V3's mixture as an unclosed `moe(...` call: `expert(hidden)` experts (their
    count the config's `experts`), a sigmoid router choosing by score plus a selection bias
    among the topk_group best of n_group groups, renormalised with norm_topk_prob, times
    routed_scaling_factor, beside the config's `shared` shared experts as one wider unit
    (`bias`: the experts' MLPs' own, `, bias = false`, where their form's default is not)."""
    ffn = (f"moe(experts = {s.need(experts)}, top_k = {s.need('num_experts_per_tok')}, "
           f"expert = {expert}({hidden}{bias}), router = sigmoid, normalize = "
           f"{'true' if s.cfg.get('norm_topk_prob') else 'false'}, selection_bias = true, "
           f"routed_scale = {num(s.need('routed_scaling_factor'))}")
    groups, top = s.need("n_group"), s.need("topk_group")
    if groups > 1:
        ffn += f", groups = {groups}, top_groups = {top}"
    if count := s.get(shared, default=0):
        ffn += f", shared = {expert}({hidden * count})"
    return ffn


def layer_kinds(s: SpecText, layers: int, types: list[str],
                model: str) -> tuple[list[str], list[str]]:
    """`types` (layer_types as read, or as the family's config derives them) and
    mlp_layer_types (as read, or first_k_dense_replace `dense` layers then `sparse` ones),
    checked: one entry per layer in each, sliding or full, dense or sparse (a refusal names
    `model`); every layer full and sparse where their lengths are wrong."""
    first = s.get("first_k_dense_replace", default=0)
    mlps = s.get("mlp_layer_types") or ["dense" if i < first else "sparse"
                                        for i in range(layers)]
    if len(types) != layers or len(mlps) != layers:
        s.refuse("layer_types", f"one entry per layer ({layers}) is needed, in layer_types and "
                                "mlp_layer_types")
        return ["full_attention"] * layers, ["sparse"] * layers
    for key, values, known in (("layer_types", types, ("sliding_attention", "full_attention")),
                               ("mlp_layer_types", mlps, ("dense", "sparse"))):
        if other := [t for t in dict.fromkeys(values) if t not in known]:
            s.refuse(key, f"{model}'s layers are {' or '.join(known)}; attndsl does not "
                          f"import `{other[0]}` for it")
    return types, mlps


def _experts(layer: str, moe: str, gate: str, up: str, down: str, router: str,
             dense: bool) -> Names:
    """A table with the experts' weights, `{e}` standing for the expert's index (and with
    `dense`, the dense layers' `mlp.*`)."""
    names = {k: v for k, v in LLAMA.names.items() if dense or not k.startswith("mlp.")}
    names |= {f"mlp.experts.{{e}}.{ours}.weight": f"{moe}.experts.{{e}}.{theirs}.weight"
              for ours, theirs in (("gate_proj", gate), ("up_proj", up), ("down_proj", down))}
    names["mlp.router.weight"] = f"{moe}.{router}.weight"
    return Names(layer, names, LLAMA.top, LLAMA.bases)


_MIXTRAL = _experts("layers.{i}.", "block_sparse_moe", "w1", "w3", "w2", "gate", False)
_QWEN3_MOE = _experts("layers.{i}.", "mlp", "gate_proj", "up_proj", "down_proj", "gate", True)
_QWEN2_MOE = Names(_QWEN3_MOE.layer, {
    **_QWEN3_MOE.names,
    **{f"mlp.shared.{p}.weight": f"mlp.shared_expert.{p}.weight"
       for p in ("gate_proj", "up_proj", "down_proj")},
    "mlp.shared_gate.weight": "mlp.shared_expert_gate.weight"}, _QWEN3_MOE.top,
    _QWEN3_MOE.bases)


def expanded(table: Names) -> Callable[[dict], Names]:
    """The table for a config: `{e}` expanded to its experts 0 .. n - 1 (n: num_local_experts
    or num_experts); a fused entry's split made for expert e by `make(e)`."""
    def names(cfg: dict) -> Names:
        n = cfg.get("num_local_experts") or cfg.get("num_experts") or \
            cfg.get("n_routed_experts") or 0
        out = {}
        for ours, theirs in table.names.items():
            if "{e}" not in ours:
                out[ours] = theirs
                continue
            for e in range(n if isinstance(n, int) else 0):
                out[ours.replace("{e}", str(e))] = (
                    (theirs[0], theirs[1](e)) if isinstance(theirs, tuple)
                    else theirs.replace("{e}", str(e)))
        return replace(table, names=out)
    return names


ROUTER_INERT = {"router_aux_loss_coef": "the load-balancing loss's weight, for training",
           "output_router_logits": "what transformers returns, not what it computes"}
# transformers' defaults (MixtralConfig, Qwen3MoeConfig, Qwen2MoeConfig, 5.23) for the fields
# the import reads
FAMILIES = [
    Family("mixtral", _read, _MIXTRAL, {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "num_experts_per_tok": 2,
        "num_local_experts": 8},
        inert={**ROUTER_INERT, "router_jitter_noise": "noise on the router's logits in training"},
        lm=True, weights_for=expanded(_MIXTRAL),
        rope={"rope_type": "default", "rope_theta": 1000000.0}),
    Family("qwen3_moe", _read, _QWEN3_MOE, {
        "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
        "num_attention_heads": 32, "num_key_value_heads": 4, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False,
        "sliding_window": 4096, "decoder_sparse_step": 1, "moe_intermediate_size": 768,
        "num_experts_per_tok": 8, "num_experts": 128, "norm_topk_prob": False,
        "use_sliding_window": False},
        inert={**ROUTER_INERT,
               "use_sliding_window": "transformers' Qwen3-MoE masks with sliding_window "
                                     "whenever it is set",
               "num_experts": "saved as num_local_experts, which the import reads first"},
        lm=True, weights_for=expanded(_QWEN3_MOE)),
    Family("qwen2_moe", _read, _QWEN2_MOE, {
        "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
        "num_attention_heads": 16, "num_key_value_heads": 16, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "use_sliding_window": False,
        "sliding_window": 4096, "max_window_layers": 28, "decoder_sparse_step": 1,
        "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
        "num_experts_per_tok": 4, "num_experts": 60, "norm_topk_prob": False,
        "qkv_bias": True},
        inert={**ROUTER_INERT, "use_sliding_window": "read into layer_types by "
                                                    "Qwen2MoeConfig; the mask follows them",
               "max_window_layers": "read into layer_types by Qwen2MoeConfig; the import "
                                    "reads it only when layer_types is absent"},
        lm=True, weights_for=expanded(_QWEN2_MOE)),
]
