"""Whisper: a speech encoder-decoder. The encoder reads hidden states (`encoder_input =
states`): the output of Whisper's convolutional stem (two convolutions with GELU, the second of
stride 2, over the log-mel frames), which the language has no form for and which stays outside,
plus its stored position table (`learned(max_source_positions)`); no mask. The decoder reads
tokens with learned positions and attends over the encoder's output, unmasked. Pre-norm
LayerNorms with a final norm per stack, exact-GELU MLPs, every projection biased but k_proj,
the head tied to the decoder's token embedding (`proj_out`), no embedding scale (Whisper
computes one and never applies it)."""

from __future__ import annotations

from .bart import _layer
from .base import Family
from .names import Names, norms
from .text import SpecText, act

__all__ = ["FAMILIES"]

_BIAS = "[q, v, o]"  # (k_proj has none, in every attention)


def _read(s: SpecText, padding: str | None) -> None:
    d = s.need("d_model")
    for side, positions, mask in (("encoder", "max_source_positions", "full"),
                                  ("decoder", "max_target_positions", "causal")):
        s.attentions[f"whisper_{side}_self"] = {
            "d_model": str(d), "heads": str(s.need(f"{side}_attention_heads")),
            "bias": _BIAS, "position": f"learned({s.need(positions)})", "mask": mask}
        stack = {"layers": str(s.need(f"{side}_layers")),
                 "ffn": f"{act(s, 'activation_function', s.need('activation_function'))}"
                        f"({s.need(f'{side}_ffn_dim')})",
                 "norm": "layernorm(pre, eps = 1e-05)"}  # (nn.LayerNorm's default)
        (s.encoder if side == "encoder" else s.stack).update(stack)
    s.attentions["whisper_cross"] = {
        "d_model": str(d), "heads": str(s.need("decoder_attention_heads")), "bias": _BIAS,
        "kind": "cross", "memory_dim": str(d), "mask": "full"}
    s.comments["whisper_encoder_self"] = ("the encoder's self attention over its convolutional "
                                          "stem's output (the stem stays outside)")
    s.comments["whisper_cross"] = "each decoder block's attention over the encoder's output"
    s.encoder_pattern, s.pattern = ["whisper_encoder_self"], ["whisper_decoder_self"]
    s.stack = {"cross": "whisper_cross", "encoder": f"{s.name}_encoder",
               "encoder_input": "states", **s.stack}
    s.head = {"decoder_start": str(s.get("decoder_start_token_id", default=50257))}


def _names(cfg: dict) -> Names:
    """The decoder's blocks as a stack's; the encoder's (`encoder.*`) and the tops as named
    tensors outside its layers; the stem outside the spec."""
    top = {"embed_tokens.weight": "decoder.embed_tokens.weight",
           "position_embeddings.weight": "decoder.embed_positions.weight",
           "encoder.position_embeddings.weight": "encoder.embed_positions.weight",
           **norms({"norm": "decoder.layer_norm", "encoder.norm": "encoder.layer_norm"}),
           "lm_head.weight": "proj_out.weight"}
    for i in range(int(cfg.get("encoder_layers") or 0)):
        top |= {f"encoder.layers.{i}.{k}": f"encoder.layers.{i}.{v}"
                for k, v in _layer(False).items()}
    return Names("decoder.layers.{i}.", _layer(True), top, ("model.",),
                 outside=(r"encoder\.conv[12]\.(weight|bias)",))


_DROPOUT = "dropout, which is off at inference"
FAMILIES = [
    Family("whisper", _read, _names({}), {  # transformers' defaults (WhisperConfig, 5.23)
        "d_model": 384, "encoder_layers": 4, "decoder_layers": 4,
        "encoder_attention_heads": 6, "decoder_attention_heads": 6, "encoder_ffn_dim": 1536,
        "decoder_ffn_dim": 1536, "activation_function": "gelu", "scale_embedding": False,
        "tie_word_embeddings": True},
        inert={"dropout": _DROPOUT, "attention_dropout": _DROPOUT,
               "activation_dropout": _DROPOUT, "init_std": "how untrained weights are drawn",
               "encoder_layerdrop": "skips layers in training only",
               "decoder_layerdrop": "skips layers in training only",
               "is_encoder_decoder": "the import writes the encoder and the decoder",
               "scale_embedding": "WhisperDecoder computes its scale and never applies it",
               "num_mel_bins": "the convolutional stem's input, outside the spec",
               "use_cache": "the decoding form always caches",
               "suppress_tokens": "a generation option (logits processors), the caller's",
               "begin_suppress_tokens": "a generation option (logits processors), the caller's",
               "max_length": "a generation option, the caller's",
               "use_weighted_layer_sum": "an audio classification head's, outside the model",
               "classifier_proj_size": "an audio classification head's, outside the model",
               **{k: "SpecAugment: masking of the features in training only" for k in (
                   "apply_spec_augment", "mask_time_prob", "mask_time_length",
                   "mask_time_min_masks", "mask_feature_prob", "mask_feature_length",
                   "mask_feature_min_masks")},
               "median_filter_width": "word timestamps' smoothing, outside the model"},
        lm=True, weights_for=_names),
]
