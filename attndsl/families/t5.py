"""T5: pre-norm RMSNorm layers with relative position buckets shared by every layer of a
stack (bidirectional in the encoder, causal in the decoder), no q.k scaling and no biases.
The whole model (T5ForConditionalGeneration's checkpoints): the encoder, then the decoder
whose blocks attend over its output, one shared embedding, the head tied to it with the
decoder's output times d_model^-0.5 (untied and unscaled where `tie_word_embeddings` is
false); a T5EncoderModel's checkpoint, or `--head none`: the encoder stack alone."""

from __future__ import annotations

from .base import WHOLE, Family
from .names import Names
from .rope import num
from .text import SpecText, mask

__all__ = ["FAMILIES"]


def _attention(s: SpecText, bidirectional: bool) -> dict[str, str]:
    return {"d_model": str(s.need("d_model")), "heads": str(s.need("num_heads")),
            "head_dim": str(s.need("d_kv")), "bias": "false", "scale": "1",
            "position": (f"relative_bias(buckets = {s.need('relative_attention_num_buckets')}"
                         f", max_distance = {s.need('relative_attention_max_distance')}"
                         + ("" if bidirectional else ", bidirectional = false") + ")")}


def _read(s: SpecText, padding: str | None) -> None:
    proj = s.need("feed_forward_proj")
    ffn = {"relu": "relu", "gated-gelu": "geglu", "gated-silu": "swiglu"}.get(proj)
    if ffn is None:
        s.refuse("feed_forward_proj", "attndsl has relu, gated-gelu and gated-silu")
        ffn = "relu"
    stack = {"ffn": f"{ffn}({s.need('d_ff')}" + (", bias = false)" if ffn == "relu" else ")"),
             "norm": f"rmsnorm(pre, eps = {num(s.need('layer_norm_epsilon'))})",
             "relative_bias": "shared"}
    s.attentions["t5_attn"] = {**_attention(s, True), "mask": mask(False, padding)}
    s.comments["t5_attn"] = "the encoder's self attention (T5 does not scale q.k)"
    s.pattern = ["t5_attn"]
    s.stack = {"layers": str(s.need("num_layers")), **stack}
    # the whole model, where the import makes a language model of it (`_lm_head`): the
    # encoder stack above, and the decoder (its own self attention, its cross attention)
    s.decoder = {"t5_decoder_attn": {**_attention(s, False), "mask": "causal"},
                    "t5_cross": {"d_model": str(s.need("d_model")),
                                 "heads": str(s.need("num_heads")),
                                 "head_dim": str(s.need("d_kv")), "bias": "false",
                                 "scale": "1", "kind": "cross",
                                 "memory_dim": str(s.need("d_model")), "mask": "padding"}}
    decoder_layers = s.get("num_decoder_layers", default=s.need("num_layers"))
    # T5Config keeps tie_word_embeddings true and says in scale_decoder_outputs what the
    # config asked: a checkpoint asking untied (T5 v1.1's) keeps its own lm_head, unscaled
    # (a config transformers 4 wrote, Flan-T5's, has no scale_decoder_outputs: its
    # tie_word_embeddings is what it asked)
    tied = s.cfg["scale_decoder_outputs"] if s.cfg.get("scale_decoder_outputs") is not None \
        else s.cfg.get("tie_word_embeddings", True) is not False
    s.head = {"cross": "t5_cross", "encoder": f"{s.name}_encoder",
              "layers": str(decoder_layers), **stack,
              "tie_embeddings": "true" if tied else "false",
              "decoder_start": str(s.get("decoder_start_token_id", "pad_token_id",
                                         default=0)),
              **({"logit_scale": f"{num(s.need('d_model') ** -0.5)}"} if tied else {})}


_LAYER = {
    **{f"self_attn.{p}_proj.weight": f"layer.0.SelfAttention.{p}.weight" for p in "qkvo"},
    "self_attn.relative_attention_bias.weight":
        "layer.0.SelfAttention.relative_attention_bias.weight",
    "attn_norm.weight": "layer.0.layer_norm.weight"}
_FFN = {"mlp.fc1.weight": "DenseReluDense.wi.weight", "mlp.fc2.weight": "DenseReluDense.wo.weight",
        "mlp.gate_proj.weight": "DenseReluDense.wi_0.weight",
        "mlp.up_proj.weight": "DenseReluDense.wi_1.weight",
        "mlp.down_proj.weight": "DenseReluDense.wo.weight", "ffn_norm.weight": "layer_norm.weight"}
_ENCODER_LAYER = {**_LAYER, **{k: f"layer.1.{v}" for k, v in _FFN.items()}}
_DECODER_LAYER = {**_LAYER, **{k: f"layer.2.{v}" for k, v in _FFN.items()},
                  **{f"cross_attn.{p}_proj.weight": f"layer.1.EncDecAttention.{p}.weight"
                     for p in "qkvo"},
                  "cross_attn_norm.weight": "layer.1.layer_norm.weight"}
_BIAS = "block.0.layer.0.SelfAttention.relative_attention_bias.weight"

_T5 = Names("encoder.block.{i}.", _ENCODER_LAYER,
            {"norm.weight": "encoder.final_layer_norm.weight",
             "relative_attention_bias.weight": f"encoder.{_BIAS}"},
            # the embedding, the decoder and its head: the import takes the encoder stack
            outside=(r"shared\.weight", r"encoder\.embed_tokens\.weight",
                     r"decoder(\.\w+)*\.weight", r"lm_head\.weight"))


def _names(cfg: dict) -> Names:
    """The encoder stack's table (above), or the whole model's (`WHOLE`): the decoder's
    blocks as a stack's, the encoder's as named tensors outside its layers."""
    if not cfg.get(WHOLE):
        return _T5
    top = {"embed_tokens.weight": "shared.weight", "norm.weight": "decoder.final_layer_norm.weight",
           "relative_attention_bias.weight": f"decoder.{_BIAS}",
           "encoder.norm.weight": "encoder.final_layer_norm.weight",
           "encoder.relative_attention_bias.weight": f"encoder.{_BIAS}",
           "lm_head.weight": "lm_head.weight"}
    for i in range(int(cfg.get("num_layers") or 0)):
        top |= {f"encoder.layers.{i}.{k}": f"encoder.block.{i}.{v}"
                for k, v in _ENCODER_LAYER.items()}
    return Names("decoder.block.{i}.", _DECODER_LAYER, top,
                 aliases={"shared.weight": ("decoder.embed_tokens.weight",
                                            "encoder.embed_tokens.weight")},
                 outside=(r"(encoder|decoder)\.embed_tokens\.weight",
                          r"decoder\.block\.0\.layer\.1\.EncDecAttention\."
                          r"relative_attention_bias\.weight"))


FAMILIES = [
    Family("t5", _read, _T5, {  # transformers' defaults (T5Config, 5.23)
        "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8,
        "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
        "layer_norm_epsilon": 1e-06, "feed_forward_proj": "relu", "is_decoder": False},
        inert={"is_decoder": "T5EncoderModel builds its encoder with is_decoder = False"},
        encoder=True, weights_for=_names,
        lm=lambda cfg: "T5EncoderModel" not in (cfg.get("architectures") or [])),
]
