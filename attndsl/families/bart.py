"""BART and the encoder-decoders built as it is (mBART, Marian, Pegasus, Blenderbot,
M2M100): an encoder stack and a decoder stack whose blocks attend over the encoder's output
(`cross`), one token embedding for both (`model.shared`, times sqrt(d_model) with
`scale_embedding`), biased projections, an exact-GELU (M2M100: ReLU) MLP, LayerNorms after
(BART, Marian) or before (the others, with a final norm per stack) each sublayer, and a tied
LM head plus `final_logits_bias` (not M2M100's). Their absolute positions differ: learned
with two rows before position 0 (BART, mBART), learned (Blenderbot), sinusoidal halves
(Marian, Pegasus: frequencies 10000^(-2i/d); M2M100: tensor2tensor's, from position
pad + 1)."""

from __future__ import annotations

from typing import Any

from ..spec import Attention
from .base import Family
from .names import Names, linear, norms
from .opt import past_offset
from .text import SpecText, act, mask

__all__ = ["FAMILIES", "TOKENS"]

# per model type: (positions: learned2 | learned | sinusoidal | t2t, pre-norm with final
# norms, layernorm_embedding, final_logits_bias)
_FORMS = {"bart": ("learned2", False, True, True), "mbart": ("learned2", True, True, True),
          "marian": ("sinusoidal", False, False, True),
          "pegasus": ("sinusoidal", True, False, True),
          "blenderbot": ("learned", True, False, True), "m2m_100": ("t2t", True, False, False)}


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    kind = cfg["model_type"]
    positions, pre, embedding_norm, _ = _FORMS[kind]
    d = s.need("d_model")
    place = "pre" if pre else "post"
    position = {"learned2": f"learned({s.need('max_position_embeddings')})",
                "learned": f"learned({s.need('max_position_embeddings')})",
                "sinusoidal": "sinusoidal(layout = halves)",
                "t2t": f"sinusoidal(layout = halves, offset = "
                       f"{int(cfg.get('pad_token_id', TOKENS[kind][2])) + 1}, "
                       "frequencies = tensor2tensor)"}[positions]
    own = not _shared(cfg)  # (Marian's unshared: each stack its own table)
    if not own and cfg.get("decoder_vocab_size") not in (None, cfg.get("vocab_size")):
        s.refuse("decoder_vocab_size", "a vocabulary of the decoder's own needs a table of its "
                                       "own (`share_encoder_decoder_embeddings = false`)")
    for side in ("encoder", "decoder"):
        heads = s.need(f"{side}_attention_heads")
        entries = {"d_model": str(d), "heads": str(heads), "position": position,
                   "mask": mask(side == "decoder", "right" if side == "encoder" else padding)}
        s.attentions[f"{kind}_{side}_self"] = entries
        stack = {"layers": str(s.need(f"{side}_layers")),
                 "ffn": f"{act(s, 'activation_function', s.need('activation_function'))}"
                        f"({s.need(f'{side}_ffn_dim')})",
                 "norm": f"layernorm({place}, eps = 1e-05)"}  # (nn.LayerNorm's default)
        if embedding_norm:  # layernorm_embedding, after the positions
            stack["embedding_norm"] = "layernorm(eps = 1e-05)"
        if side == "encoder" and own:  # its own table of vocab_size source tokens
            stack["vocab"] = str(s.need("vocab_size"))
            if cfg.get("scale_embedding"):
                stack["embedding_scale"] = f"sqrt({d})"
        (s.encoder if side == "encoder" else s.stack).update(stack)
    s.attentions[f"{kind}_cross"] = {
        "d_model": str(d), "heads": str(s.need("decoder_attention_heads")), "kind": "cross",
        "memory_dim": str(d), "mask": "padding"}
    s.comments[f"{kind}_encoder_self"] = "the encoder's self attention over the source tokens"
    s.comments[f"{kind}_cross"] = "each decoder block's attention over the encoder's output"
    s.encoder_pattern, s.pattern = [f"{kind}_encoder_self"], [f"{kind}_decoder_self"]
    s.stack = {"cross": f"{kind}_cross", "encoder": f"{s.name}_encoder", **s.stack}
    start, bos, _ = (cfg.get(key, default) for key, default in zip(
        ("decoder_start_token_id", "bos_token_id", "pad_token_id"), TOKENS[kind], strict=True))
    start = bos if start is None else start  # (mBART's: generate's fallback)
    s.head = {"decoder_start": str(start or 0)}
    if _FORMS[kind][3]:
        s.head["head_bias"] = "true"  # final_logits_bias
    if cfg.get("scale_embedding"):
        s.head["embedding_scale"] = f"sqrt({d})"
    if own and cfg.get("decoder_vocab_size") is not None:  # the decoder's own vocabulary
        s.head["vocab"] = str(cfg["decoder_vocab_size"])


def _shared(cfg: dict) -> bool:
    """Whether the two stacks share one token embedding (Marian's
    `share_encoder_decoder_embeddings`; every other type's always)."""
    return cfg.get("share_encoder_decoder_embeddings") is not False


def _bias(t: Any, a: Attention, cfg: dict) -> Any:
    """final_logits_bias [1, vocab] as the LM head's bias [vocab]."""
    return t.reshape(-1)


def _layer(cross: bool) -> dict:
    """A block's tensors, attndsl's name -> the checkpoint's within the layer."""
    out = {**{k: v for p in "qkv" for k, v in linear(f"self_attn.{p}_proj",
                                                      f"self_attn.{p}_proj").items()},
           **linear("self_attn.o_proj", "self_attn.out_proj"),
           **linear("mlp.fc1", "fc1"), **linear("mlp.fc2", "fc2"),
           **norms({"attn_norm": "self_attn_layer_norm", "ffn_norm": "final_layer_norm"})}
    if cross:
        out |= {k: v for p in "qkv" for k, v in linear(f"cross_attn.{p}_proj",
                                                        f"encoder_attn.{p}_proj").items()}
        out |= linear("cross_attn.o_proj", "encoder_attn.out_proj")
        out |= norms({"cross_attn_norm": "encoder_attn_layer_norm"})
    return out


def _names(cfg: dict) -> Names:
    """The checkpoint's names: the decoder's blocks as a stack's, the encoder's (`encoder.*`)
    and the tops as named tensors outside the layers."""
    positions, pre, embedding_norm, bias = _FORMS[cfg["model_type"]]
    top: dict[str, Any] = {"embed_tokens.weight": "shared.weight"} if _shared(cfg) else {
        "embed_tokens.weight": "decoder.embed_tokens.weight",
        "encoder.embed_tokens.weight": "encoder.embed_tokens.weight"}
    for ours, side in (("", "decoder"), ("encoder.", "encoder")):
        if positions.startswith("learned"):
            table = f"{side}.embed_positions.weight"
            top[f"{ours}position_embeddings.weight"] = (table, past_offset) \
                if positions == "learned2" else table
        if embedding_norm:
            top |= norms({f"{ours}embedding_norm": f"{side}.layernorm_embedding"})
        if pre:
            top |= norms({f"{ours}norm": f"{side}.layer_norm"})
    for i in range(int(cfg.get("encoder_layers") or 0)):
        top |= {f"encoder.layers.{i}.{k}": f"encoder.layers.{i}.{v}"
                for k, v in _layer(False).items()}
    if bias:
        top["lm_head.bias"] = ("final_logits_bias", _bias)
    top["lm_head.weight"] = "lm_head.weight"
    return Names("decoder.layers.{i}.", _layer(True), top, ("model.",),
                 aliases={"shared.weight": ("decoder.embed_tokens.weight",
                                            "encoder.embed_tokens.weight")} if _shared(cfg)
                 else {},
                 # the copies of the shared embedding a checkpoint may keep; M2M100's,
                 # Marian's tables computed, not read
                 outside=(r"(encoder|decoder)\.embed_tokens\.weight",
                          r"(encoder|decoder)\.embed_positions\.weight"))


_DROPOUT = "dropout, which is off at inference"
_INERT = {
    "dropout": _DROPOUT, "attention_dropout": _DROPOUT, "activation_dropout": _DROPOUT,
    "classifier_dropout": "a classification head's dropout, outside the model",
    "encoder_layerdrop": "skips layers in training only",
    "decoder_layerdrop": "skips layers in training only",
    "init_std": "how untrained weights are drawn; a checkpoint brings its own",
    "is_encoder_decoder": "the import writes the encoder and the decoder",
    "forced_eos_token_id": "a generation option (forces eos at the last step), the caller's",
    "eos_token_id": "where generation stops, the caller's (`--eos`)",
    "use_cache": "the decoding form always caches",
    "is_decoder": "BartModel builds its encoder and decoder whatever it says",
    "encoder_no_repeat_ngram_size": "a generation option (Blenderbot's: no n-gram of the source "
                                    "repeated), the caller's: attndsl's greedy decoding applies "
                                    "no logits processor"}
_COMMON = {"d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
           "encoder_attention_heads": 16, "decoder_attention_heads": 16,
           "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096, "activation_function": "gelu",
           "scale_embedding": False, "tie_word_embeddings": True, "is_decoder": False}

_TYPES = {  # the config fields of their own the import reads, with their types
    **dict.fromkeys(("encoder_layers", "decoder_layers", "encoder_attention_heads",
                     "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
                     "decoder_vocab_size"), ("int", 1)),
    "share_encoder_decoder_embeddings": ("bool", None)}
_DEFAULTS = {  # transformers' defaults (BartConfig, ..., 5.23) for the fields the import reads
    "bart": _COMMON, "mbart": _COMMON,
    "marian": {**_COMMON, "share_encoder_decoder_embeddings": True},
    "pegasus": _COMMON,
    "blenderbot": {**_COMMON, "encoder_layers": 2, "decoder_layers": 24,
                   "encoder_attention_heads": 32, "decoder_attention_heads": 32,
                   "d_model": 2560, "encoder_ffn_dim": 10240, "decoder_ffn_dim": 10240},
    "m2m_100": {**{k: v for k, v in _COMMON.items() if k != "is_decoder"},
                "activation_function": "relu", "scale_embedding": True},
}
# the config classes' start and padding tokens (untyped fields: a config.json without them
# means these): (decoder_start_token_id, bos_token_id, pad_token_id)
TOKENS = {"bart": (2, 0, 1), "mbart": (None, 0, 1), "marian": (58100, None, 58100),
          "pegasus": (0, None, 0), "blenderbot": (1, 1, 0), "m2m_100": (2, 0, 1)}
FAMILIES = [Family(kind, _read, _names({"model_type": kind}), defaults, inert=_INERT, lm=True,
                   weights_for=_names, types=_TYPES) for kind, defaults in _DEFAULTS.items()]
