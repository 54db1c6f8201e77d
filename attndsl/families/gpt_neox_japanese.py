"""GPT-NeoX-Japanese: GPT-NeoX's per-head fused `query_key_value` and pre-LayerNorm blocks, in
sequence (no parallel residual), without biases on the projections or the MLP; the last layer
alone keeps an attention output bias apart (`dense_bias`, added to the output projection's
result before the residual add: its `bias = [o]`). The MLP is `int(hidden_size *
intermediate_multiple_size)` wide; RoPE rotates `partial_rotary_factor` of each head
(rotate-half), its base and fraction read from `rope_parameters`, or from the older
`rotary_emb_base` and `rotary_pct`; the head (`embed_out`) is tied to `embed_in` by default."""

from __future__ import annotations

from .base import Family
from .names import Names, norms, per_head, qkv_names
from .rope import num, rope
from .text import SpecText, act, mask

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    head_dim = d // max(heads, 1)
    # as GPTNeoXJapaneseConfig.convert_rope_params_to_dict: rope_scaling or rope_parameters,
    # their base and fraction defaulting to rotary_emb_base and rotary_pct (the top-level
    # rope_theta and partial_rotary_factor are not read)
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    params.setdefault("rope_theta", s.get("rotary_emb_base", default=10000.0))
    params.setdefault("partial_rotary_factor", s.get("rotary_pct", default=1.0))
    if "type" in params:
        params.setdefault("rope_type", params["type"])
    entries = {"d_model": str(d), "heads": str(heads), "bias": "false",
               "position": rope(s, params, head_dim), "mask": mask(True, padding)}
    layers = s.need("num_hidden_layers")
    s.attentions["gpt_neox_japanese_attn"] = entries
    # the last layer's attention is built with use_bias: its dense_bias
    s.attentions["gpt_neox_japanese_last"] = {**entries, "bias": "[o]"}
    s.comments["gpt_neox_japanese_last"] = ("the last layer: an output bias (`dense_bias`) "
                                            "added before the residual")
    s.pattern = ["gpt_neox_japanese_attn"] * (layers - 1) + ["gpt_neox_japanese_last"]
    hidden = int(d * s.need("intermediate_multiple_size"))
    s.stack = {"layers": str(layers),
               "ffn": f"{act(s, 'hidden_act', s.need('hidden_act'))}({hidden}, bias = false)",
               "norm": f"layernorm(pre, eps = {num(s.need('layer_norm_eps'))})"}


_NEOX_JAPANESE = Names("layers.{i}.", {
    **qkv_names("attention.query_key_value", per_head, bias=False),
    "self_attn.o_proj.weight": "attention.dense.weight",
    "self_attn.o_proj.bias": "attention.dense_bias",
    **norms({"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}),
    "mlp.fc1.weight": "mlp.dense_h_to_4h.weight", "mlp.fc2.weight": "mlp.dense_4h_to_h.weight"},
    {**norms({"norm": "final_layer_norm"}), "embed_tokens.weight": "embed_in.weight",
     "lm_head.weight": "embed_out.weight"}, ("gpt_neox_japanese.",))

_UNREAD = "GPTNeoXJapaneseConfig does not read it (its own names: rope_parameters, " \
          "rotary_emb_base, rotary_pct)"

# transformers' defaults (GPTNeoXJapaneseConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("gpt_neox_japanese", _read, _NEOX_JAPANESE, {
        "hidden_size": 2560, "num_hidden_layers": 32, "num_attention_heads": 32,
        "intermediate_multiple_size": 4, "hidden_act": "gelu", "layer_norm_eps": 1e-05,
        "tie_word_embeddings": True, "is_decoder": False},
        inert={"is_decoder": "GPT-NeoX-Japanese is causal whatever is_decoder says (the model "
                             "never reads it)",
               "rope_theta": _UNREAD, "partial_rotary_factor": _UNREAD},
        lm=True),
]
