"""MPT as transformers runs it: ALiBi (max_bias 8, added to the scaled scores), no biases
anywhere (LayerNorms without one), a fused Wqkv (q, k, v rows), a 4 d_model exact-GELU MLP and
a tied head. transformers' MptModel ignores several of MosaicML's options (alibi_bias_max,
no_bias, expansion_ratio, qk_ln, prefix_lm...): a config that sets them otherwise describes a
model neither transformers nor attndsl computes, and is refused by name. attn_config's
clip_qkv clamps Wqkv's output: `clip_qkv = c`."""

from __future__ import annotations

from .base import Family
from .names import Names, qkv_names, rows
from .rope import num
from .text import SpecText, mask

__all__ = ["FAMILIES", "GENERIC"]

_IGNORED = "transformers' MPT ignores it (it computes {}), so no model that sets it is imported"
# attn_config's fields: (the value transformers' MPT computes as, what it computes)
_ATTN_AS = {"qk_ln": (False, "no q/k LayerNorm"), "prefix_lm": (False, "a causal mask"),
            "attn_uses_sequence_id": (False, "one sequence per row"),
            "alibi": (True, "ALiBi"), "alibi_bias_max": (8, "ALiBi with max_bias 8")}
_ATTN_INERT = ("attn_impl", "attn_pdrop", "softmax_scale", "clip_qkv", "attn_type")
# what every saved sub-config carries (PreTrainedConfig's own fields): none is MPT's attention's
GENERIC = ("_name_or_path", "architectures", "chunk_size_feed_forward", "dtype", "torch_dtype",
           "id2label", "label2id", "is_encoder_decoder", "model_type", "output_attentions",
           "output_hidden_states", "problem_type", "return_dict", "transformers_version")


def _attention_config(s: SpecText) -> dict:
    """attn_config's fields (MptAttentionConfig's defaults filled in), each one read, inert
    or refused by name."""
    given = s.get("attn_config", default={})
    cfg = {"attn_type": "multihead_attention", "clip_qkv": None, "softmax_scale": None,
           **{k: v for k, (v, _) in _ATTN_AS.items()}, **(given if isinstance(given, dict)
                                                           else {})}
    for key, (value, what) in _ATTN_AS.items():
        if cfg[key] != value:
            s.problems.append(f"`attn_config.{key}` = {cfg[key]!r}: "
                              + _IGNORED.format(what))
    if cfg["attn_type"] != "multihead_attention":
        s.problems.append(f"`attn_config.attn_type` = {cfg['attn_type']!r}: transformers' MPT "
                          "splits Wqkv into as many key and value heads as query heads")
    clip = cfg["clip_qkv"]  # transformers clamps Wqkv's output where it is truthy
    if clip and (isinstance(clip, bool) or not isinstance(clip, int | float) or clip < 0):
        s.problems.append(f"`attn_config.clip_qkv` = {clip!r}: a clamp of the projected q, k "
                          "and v to [-c, c] needs a number c > 0")
    unknown = [k for k in cfg if k not in (*_ATTN_AS, *_ATTN_INERT, *GENERIC)]
    if unknown:
        s.problems.append(f"`attn_config` has fields attndsl does not know: {', '.join(unknown)}")
    return cfg


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("d_model"), s.need("n_heads")
    attn = _attention_config(s)
    entries = {"d_model": str(d), "heads": str(heads), "bias": "false"}
    if attn["softmax_scale"] is not None:
        entries["scale"] = num(attn["softmax_scale"])
    entries["position"] = "alibi"  # Press's slopes, as build_mpt_alibi_tensor's
    if isinstance(attn["clip_qkv"], int | float) and attn["clip_qkv"] > 0:
        entries["clip_qkv"] = num(attn["clip_qkv"])  # Wqkv's output clamped to [-c, c]
    entries["mask"] = mask(True, padding)
    s.attentions["mpt_attn"] = entries
    s.pattern = ["mpt_attn"]
    if s.get("expansion_ratio") != 4:
        s.refuse("expansion_ratio", _IGNORED.format("a 4 d_model wide MLP"))
    if not cfg.get("no_bias"):
        s.refuse("no_bias", _IGNORED.format("no biases"))
    if cfg.get("logit_scale") is not None:
        s.refuse("logit_scale", _IGNORED.format("unscaled logits"))
    s.stack = {"layers": str(s.need("n_layers")), "ffn": f"gelu({4 * d}, bias = false)",
               "norm": f"layernorm(pre, eps = {num(s.need('layer_norm_epsilon'))}, "
                       "bias = false)"}


def _third(part: int):
    return rows(lambda a, cfg: part * a.d_model, lambda a, cfg: a.d_model)


_MPT = Names("blocks.{i}.", {
    **qkv_names("attn.Wqkv", _third, bias=False),
    "self_attn.o_proj.weight": "attn.out_proj.weight",
    "mlp.fc1.weight": "ffn.up_proj.weight", "mlp.fc2.weight": "ffn.down_proj.weight",
    "attn_norm.weight": "norm_1.weight", "ffn_norm.weight": "norm_2.weight"},
    {"norm.weight": "norm_f.weight", "embed_tokens.weight": "wte.weight",
     "lm_head.weight": "lm_head.weight"}, ("transformer.",))

_SAME = "the same values in float32"

# transformers' defaults (MptConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("mpt", _read, _MPT, {
        "d_model": 2048, "n_heads": 16, "n_layers": 24, "expansion_ratio": 4,
        "layer_norm_epsilon": 1e-05, "no_bias": True, "tie_word_embeddings": True},
        inert={"max_seq_len": "the longest sequence trained on: ALiBi is computed at any "
                              "length",
               "emb_pdrop": "dropout, which is off at inference",
               "learned_pos_emb": "transformers' MPT has no learned positions whatever it says "
                                  "(ALiBi places the tokens)",
               "embedding_fraction": "scales the embedding's gradient in training: "
                                     "the same forward values",
               "norm_type": f"low_precision_layernorm computes a LayerNorm in the input's dtype: "
                            f"{_SAME}",
               "init_device": "where untrained weights are drawn"},
        lm=True),
]
