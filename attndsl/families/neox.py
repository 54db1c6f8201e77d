"""The GPT-NeoX-like decoders: gpt_neox, gptj, codegen, falcon, bloom: LayerNorm decoders with
GELU MLPs, often with a parallel residual, and fused q/k/v projections."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .names import Names, Split, linear, norms, per_head, qkv_names
from .rope import num, rope
from .text import SpecText, act, mask

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    """gpt_neox, gptj, codegen, falcon, bloom: LayerNorm decoders with GELU MLPs, often
    parallel."""
    cfg, t = s.cfg, s.cfg["model_type"]
    d = s.need("hidden_size", "n_embd")
    heads = s.need("num_attention_heads", "n_head")
    head_dim = d // max(heads, 1)
    eps = s.need("layer_norm_eps", "layer_norm_epsilon")
    layers = s.need("num_hidden_layers", "n_layer")
    entries = {"d_model": str(d), "heads": str(heads)}
    residual = None
    hidden = 4 * d
    ffn_bias = True
    if t == "gpt_neox":
        entries["bias"] = "true" if cfg.get("attention_bias") else "false"
        entries["position"] = rope(s, cfg.get("rope_parameters"), head_dim,
                                    dim=None if cfg.get("rope_parameters") else
                                    int(head_dim * s.get("rotary_pct", "partial_rotary_factor",
                                                         default=0.25)))  # as GPTNeoXConfig
        residual = "parallel" if cfg.get("use_parallel_residual") else None
        hidden = s.need("intermediate_size")
        ffn_act = act(s, "hidden_act", s.need("hidden_act"))
    elif t in ("gptj", "codegen"):  # CodeGen is GPT-J's block with its q, v, k fused
        entries["bias"] = "false"
        if t == "codegen" and heads % _MP_NUM:
            s.refuse("n_head", f"CodeGen splits its fused qkv_proj into {_MP_NUM} blocks of "
                               f"whole heads: n_head must be a multiple of {_MP_NUM}")
        rotary = cfg.get("rotary_dim") or head_dim
        entries["position"] = rope(s, {"rope_theta": 10000.0}, head_dim, interleaved=True,
                                    dim=rotary)
        residual = "parallel(shared_norm = true)"
        hidden = cfg.get("n_inner") or 4 * d
        ffn_act = act(s, "activation_function", s.need("activation_function"))
        s.head["head_bias"] = "true"  # GPT-J's and CodeGen's LM heads have a bias
    elif t == "bloom":
        entries["bias"] = "true"
        entries["position"] = "alibi"
        if cfg.get("apply_residual_connection_post_layernorm"):
            s.refuse("apply_residual_connection_post_layernorm",
                     "the residual from the normed input has no attndsl form")
        ffn_act = "gelu_tanh"  # bloom_gelu_forward: the tanh approximation
        s.head["embedding_norm"] = f"layernorm(eps = {num(eps)})"  # word_embeddings_layernorm
    else:  # falcon
        bias = "true" if cfg.get("bias") else "false"
        entries["bias"] = bias
        if cfg.get("new_decoder_architecture"):
            entries["kv_heads"] = str(s.need("num_kv_heads"))
        elif cfg.get("multi_query"):
            entries["kv_heads"] = "1"
        if cfg.get("alibi"):
            entries["position"] = "alibi(scaled = true, rounding = bfloat16)"  # as trained
            if padding == "left":
                s.problems.append("`alibi` = true with --padding left: Falcon-RW's bfloat16 "
                                  "ALiBi rounds each token's position among the real tokens, "
                                  "which attndsl reproduces for right padding only (--padding "
                                  "right)")
        else:
            entries["position"] = rope(s, cfg.get("rope_parameters"), head_dim)
        if cfg.get("parallel_attn") or cfg.get("new_decoder_architecture"):
            residual = "parallel" if _two_norms(cfg) else "parallel(shared_norm = true)"
        hidden = cfg.get("ffn_hidden_size") or 4 * d
        ffn_bias = bool(cfg.get("bias"))
        ffn_act = act(s, "activation", s.need("activation"))
    entries["mask"] = mask(True, padding)
    s.attentions[f"{t}_attn"] = entries
    s.pattern = [f"{t}_attn"]
    s.stack = {"layers": str(layers),
               "ffn": f"{ffn_act}({hidden}" + (")" if ffn_bias else ", bias = false)"),
               "norm": f"layernorm(pre, eps = {num(eps)})"}
    if residual:
        s.stack["residual"] = residual


def _falcon(part: int) -> Split:
    """Falcon's three layouts: grouped [kv, groups + 2, head_dim] (new_decoder_architecture),
    [heads + 2, head_dim] (multi_query) or per head [heads, 3, head_dim]."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        rest = t.shape[1:]
        if cfg.get("new_decoder_architecture"):
            g = a.heads // a.kv_heads
            grouped = t.reshape(a.kv_heads, g + 2, a.head_dim, *rest)
            piece = grouped[:, :g] if part == 0 else grouped[:, g + part - 1: g + part]
            return piece.reshape(-1, *rest)
        if cfg.get("multi_query", True):
            flat = t.reshape(a.heads + 2, a.head_dim, *rest)
            piece = flat[: a.heads] if part == 0 else flat[a.heads + part - 1]
            return piece.reshape(-1, *rest)
        return per_head(part)(t, a, cfg)
    return split


_MP_NUM = 4  # CodeGen's qkv_proj: 4 blocks (its TPU cores), each of q, v, k rows for heads / 4


def _codegen(part: int) -> Split:
    """q, k or v of CodeGen's qkv_proj: rows [4, 3, d_model / 4] with q, v, k in that order
    in each block, and block b holding heads b * heads / 4 onwards."""
    def split(t: Any, a: Attention, cfg: dict) -> Any:
        d = a.heads * a.head_dim
        return t.reshape(_MP_NUM, 3, d // _MP_NUM, *t.shape[1:])[:, (0, 2, 1)[part]].reshape(
            d, *t.shape[1:])
    return split


_NEOX = Names("layers.{i}.", {
    **qkv_names("attention.query_key_value", per_head),
    **linear("self_attn.o_proj", "attention.dense"),
    **norms({"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}),
    **linear("mlp.fc1", "mlp.dense_h_to_4h"), **linear("mlp.fc2", "mlp.dense_4h_to_h")},
    {**norms({"norm": "final_layer_norm"}), "embed_tokens.weight": "embed_in.weight",
     "lm_head.weight": "embed_out.weight"}, ("gpt_neox.",))
_GPTJ = Names("h.{i}.", {
    **{k: v for p in "qkv" for k, v in linear(f"self_attn.{p}_proj", f"attn.{p}_proj").items()},
    **linear("self_attn.o_proj", "attn.out_proj"), **norms({"attn_norm": "ln_1"}),
    **linear("mlp.fc1", "mlp.fc_in"), **linear("mlp.fc2", "mlp.fc_out")},
    {**norms({"norm": "ln_f"}), "embed_tokens.weight": "wte.weight",
     "lm_head.weight": "lm_head.weight", "lm_head.bias": "lm_head.bias"}, ("transformer.",))
_CODEGEN = Names("h.{i}.", {
    **qkv_names("attn.qkv_proj", _codegen, bias=False),
    "self_attn.o_proj.weight": "attn.out_proj.weight", **norms({"attn_norm": "ln_1"}),
    **linear("mlp.fc1", "mlp.fc_in"), **linear("mlp.fc2", "mlp.fc_out")},
    {**norms({"norm": "ln_f"}), "embed_tokens.weight": "wte.weight",
     "lm_head.weight": "lm_head.weight", "lm_head.bias": "lm_head.bias"}, ("transformer.",))
_BLOOM = Names("h.{i}.", {
    **qkv_names("self_attention.query_key_value", per_head),
    **linear("self_attn.o_proj", "self_attention.dense"),
    **norms({"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}),
    **linear("mlp.fc1", "mlp.dense_h_to_4h"), **linear("mlp.fc2", "mlp.dense_4h_to_h")},
    {**norms({"norm": "ln_f", "embedding_norm": "word_embeddings_layernorm"}),
     "embed_tokens.weight": "word_embeddings.weight", "lm_head.weight": "lm_head.weight"},
    ("transformer.",))
_FALCON_MLP = {**linear("self_attn.o_proj", "self_attention.dense"),
               **linear("mlp.fc1", "mlp.dense_h_to_4h"),
               **linear("mlp.fc2", "mlp.dense_4h_to_h"),
               **qkv_names("self_attention.query_key_value", _falcon)}
_FALCON_TOP = {**norms({"norm": "ln_f"}), "embed_tokens.weight": "word_embeddings.weight",
               "lm_head.weight": "lm_head.weight"}
_FALCON_TWO_NORMS = Names("h.{i}.", {**_FALCON_MLP, **norms({"attn_norm": "ln_attn",
                                                               "ffn_norm": "ln_mlp"})},
                          _FALCON_TOP, ("transformer.",))
_FALCON = Names("h.{i}.", {**_FALCON_MLP, **norms({
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"})},
    _FALCON_TOP, ("transformer.",))


def _two_norms(cfg: dict) -> bool:
    """Falcon's new decoder architecture with a norm for attention and one for the MLP."""
    return bool(cfg.get("new_decoder_architecture")) and \
        cfg.get("num_ln_in_parallel_attn") in (None, 2)


def _falcon_names(cfg: dict) -> Names:
    """Two norms are kept as ln_attn and ln_mlp."""
    return _FALCON_TWO_NORMS if _two_norms(cfg) else _FALCON


# transformers' own defaults (its config classes, 5.23) for the fields the import reads
FAMILIES = [
    Family("gpt_neox", _read, _NEOX, {
        "hidden_size": 6144, "num_hidden_layers": 44, "num_attention_heads": 64,
        "intermediate_size": 24576, "hidden_act": "gelu", "layer_norm_eps": 1e-05,
        "tie_word_embeddings": False, "use_parallel_residual": True, "attention_bias": True,
        "is_decoder": False},
        inert={"is_decoder": "GPT-NeoX is causal whatever is_decoder says (the model never "
                             "reads it)"}, lm=True),
    Family("gptj", _read, _GPTJ, {
        "n_positions": 2048, "n_embd": 4096, "n_layer": 28, "n_head": 16, "rotary_dim": 64,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
        "tie_word_embeddings": False}, lm=True),
    Family("codegen", _read, _CODEGEN, {
        "n_positions": 2048, "n_embd": 4096, "n_layer": 28, "n_head": 16, "rotary_dim": 64,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
        "tie_word_embeddings": False},
        inert={"n_ctx": "a context length CodeGen's modules never read"}, lm=True),
    Family("falcon", _read, _FALCON, {
        "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
        "layer_norm_epsilon": 1e-05, "alibi": False, "new_decoder_architecture": False,
        "multi_query": True, "parallel_attn": True, "bias": False, "activation": "gelu",
        "tie_word_embeddings": True},
        inert={"num_kv_heads": "read with new_decoder_architecture; otherwise every head is a "
                               "kv head (one with multi_query)",
               "num_ln_in_parallel_attn": "read with new_decoder_architecture; the older "
                                          "architecture has one norm",
               "multi_query": "read unless new_decoder_architecture, which names its kv heads",
               "rope_parameters": "read unless alibi, which has no rotary positions"},
        weights_for=_falcon_names, lm=True),
    Family("bloom", _read, _BLOOM, {
        "hidden_size": 64, "n_layer": 2, "n_head": 8, "layer_norm_epsilon": 1e-05,
        "apply_residual_connection_post_layernorm": False, "tie_word_embeddings": True},
        lm=True),
]
