"""T5's encoder: pre-norm RMSNorm layers with shared relative position buckets and no q.k
scaling."""

from __future__ import annotations

from .base import Family
from .names import Names
from .rope import num
from .text import SpecText, mask

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    proj = s.need("feed_forward_proj")
    ffn = {"relu": "relu", "gated-gelu": "geglu", "gated-silu": "swiglu"}.get(proj)
    if ffn is None:
        s.refuse("feed_forward_proj", "attndsl has relu, gated-gelu and gated-silu")
        ffn = "relu"
    s.attentions["t5_attn"] = {
        "d_model": str(s.need("d_model")), "heads": str(s.need("num_heads")),
        "head_dim": str(s.need("d_kv")), "bias": "false", "scale": "1",
        "position": (f"relative_bias(buckets = {s.need('relative_attention_num_buckets')}"
                     f", max_distance = {s.need('relative_attention_max_distance')})"),
        "mask": mask(False, padding)}
    s.comments["t5_attn"] = "the encoder's self attention (T5 does not scale q.k)"
    s.pattern = ["t5_attn"]
    s.stack = {"layers": str(s.need("num_layers")),
               "ffn": f"{ffn}({s.need('d_ff')}" + (", bias = false)" if ffn == "relu" else ")"),
               "norm": f"rmsnorm(pre, eps = {num(s.need('layer_norm_epsilon'))})",
               "relative_bias": "shared"}


_T5 = Names("encoder.block.{i}.", {
    **{f"self_attn.{p}_proj.weight": f"layer.0.SelfAttention.{p}.weight" for p in "qkvo"},
    "self_attn.relative_attention_bias.weight":
        "layer.0.SelfAttention.relative_attention_bias.weight",
    "attn_norm.weight": "layer.0.layer_norm.weight",
    "ffn_norm.weight": "layer.1.layer_norm.weight",
    "mlp.fc1.weight": "layer.1.DenseReluDense.wi.weight",
    "mlp.fc2.weight": "layer.1.DenseReluDense.wo.weight",
    "mlp.gate_proj.weight": "layer.1.DenseReluDense.wi_0.weight",
    "mlp.up_proj.weight": "layer.1.DenseReluDense.wi_1.weight",
    "mlp.down_proj.weight": "layer.1.DenseReluDense.wo.weight"},
    {"norm.weight": "encoder.final_layer_norm.weight",
     "relative_attention_bias.weight":
         "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"},
    # the embedding, the decoder and its head: the import takes the encoder stack
    outside=(r"shared\.weight", r"encoder\.embed_tokens\.weight", r"decoder(\.\w+)*\.weight",
             r"lm_head\.weight"))

FAMILIES = [
    Family("t5", _read, _T5, {  # transformers' defaults (T5Config, 5.23)
        "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8,
        "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
        "layer_norm_epsilon": 1e-06, "feed_forward_proj": "relu", "is_decoder": False},
        inert={"is_decoder": "T5EncoderModel builds its encoder with is_decoder = False"},
        encoder=True),
]
