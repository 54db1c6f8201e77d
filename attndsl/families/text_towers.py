"""CLIP's and SigLIP's text towers (CLIPTextModel, SiglipTextModel: Stable Diffusion's text
encoder among them): token ids in, hidden states out (`lm_head = false`): the token
embedding plus a learned position table, pre-norm blocks of biased softmax attention (causal
in CLIP, and in both with the padding on the right hidden, as their attention mask does;
`--padding none` for SigLIP run on full rows of padded tokens) and MLPs, and the final
LayerNorm. The output is
`last_hidden_state`; the pooled output (CLIP's row at the end-of-text token, SigLIP's head)
and the projections stay outside. The import always has the embeddings: these models read
token ids."""

from __future__ import annotations

from .base import Family
from .names import Names, norms
from .rope import num
from .text import SpecText, act, mask
from .vision import COMMON_INERT, TOWER_LAYER

__all__ = ["FAMILIES"]


def _read(s: SpecText, padding: str | None) -> None:
    clip = s.cfg["model_type"] == "clip_text_model"
    name = f"{s.name}_self"
    entries = {"d_model": str(s.need("hidden_size")),
               "heads": str(s.need("num_attention_heads")), "bias": "true",
               "position": f"learned(max_len = {s.need('max_position_embeddings')})",
               "mask": mask(clip, padding)}
    s.attentions[name] = entries
    s.pattern = [name]
    s.comments[name] = ("causal attention over the tokens" if clip else
                        "attention over every token")
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{act(s, 'hidden_act', s.need('hidden_act'))}"
                      f"({s.need('intermediate_size')})",
               "norm": f"layernorm(pre, eps = {num(s.need('layer_norm_eps'))})",
               "vocab": str(s.need("vocab_size")), "lm_head": "false"}


_NAMES = Names("encoder.layers.{i}.", TOWER_LAYER, {  # (the vision towers' blocks' names)
    "embed_tokens.weight": "embeddings.token_embedding.weight",
    "position_embeddings.weight": "embeddings.position_embedding.weight",
    **norms({"norm": "final_layer_norm"})}, ("text_model.",),
    outside=(r"text_projection\.weight", r"head\.(weight|bias)"))
_INERT = {**COMMON_INERT,
          "projection_dim": "the text projection, outside (hidden states are the output)",
          "projection_size": "the pooling head, outside (hidden states are the output)"}
FAMILIES = [
    Family("clip_text_model", _read, _NAMES, {  # (CLIPTextConfig, 5.23)
        "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 12,
        "num_attention_heads": 8, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5},
        inert=_INERT, encoder=True),
    Family("siglip_text_model", _read, _NAMES, {  # (SiglipTextConfig, 5.23)
        "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
        "num_attention_heads": 12, "hidden_act": "gelu_pytorch_tanh",
        "layer_norm_eps": 1e-6}, inert=_INERT, encoder=True),
]
