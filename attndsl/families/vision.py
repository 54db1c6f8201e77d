"""Vision transformers: ViT, DINOv2, BEiT, SigLIP's and CLIP's vision towers, Pixtral's
encoder. Each is a stack of
pre-norm blocks over an image's patches (`patches`: the patch convolution, a class token but
in SigLIP, and a learned table of the training grid's positions, which transformers
interpolates bicubically at other image sizes as attndsl does), unmasked softmax attention
with biased projections, an MLP, and a final LayerNorm (CLIP's pre-layernorm instead, and no
final norm: its `post_layernorm` is the pooled output's). DINOv2 scales each sublayer's output
by a learned vector (`layer_scale`); DINOv2 with registers adds learned rows after the
class token, and resizes its table with PIL's antialiased bicubic. The import is the hidden
states, `last_hidden_state`; poolers and heads stay outside. Pixtral's vision encoder has
no position table: axial 2-D RoPE turns each patch's queries and keys by its row and column
(`rope(axial = true)`), after an RMSNorm of the patch rows, with gated MLPs and no final
norm."""

from __future__ import annotations

from .base import Family
from .names import Names, linear, norms, rows
from .rope import num
from .text import SpecText, act

__all__ = ["COMMON_INERT", "FAMILIES", "TOWER_LAYER"]


def _square(s: SpecText, key: str) -> int:
    """An image or patch size: one number, or a square's [h, w]."""
    value = s.need(key)
    if isinstance(value, list | tuple):
        if len(set(value)) != 1:
            s.refuse(key, "attndsl's patches and position tables are square")
            return 1
        value = value[0]
    return int(value)


def _read(s: SpecText, padding: str | None) -> None:
    kind = s.cfg["model_type"]
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    eps = num(s.need("layer_norm_eps"))
    dinov2 = kind in ("dinov2", "dinov2_with_registers")
    towers = ("siglip_vision_model", "clip_vision_model")  # (no qkv_bias: biased always)
    bias = "true" if kind in towers or s.get("qkv_bias") else "[o]"
    s.attentions[f"{s.name}_self"] = {"d_model": str(d), "heads": str(heads), "bias": bias,
                                      "mask": "full"}
    s.pattern = [f"{s.name}_self"]
    hidden = int(d * s.need("mlp_ratio")) if dinov2 else s.need("intermediate_size")
    ffn = f"{act(s, 'hidden_act', s.need('hidden_act'))}({hidden})"
    if dinov2 and s.get("use_swiglu_ffn"):  # (giant's)
        ffn = f"swiglu({_swiglu_width(None, s.cfg)}, bias = true)"
    size = _square(s, "patch_size")
    grid = _square(s, "image_size") // max(size, 1)
    patches = f"size = {size}, channels = {s.need('num_channels')}"
    if kind == "clip_vision_model":
        patches += ", bias = false"
    if kind not in ("siglip_vision_model", "ijepa"):
        patches += ", class_token = true"
    if kind == "deit":
        patches += ", distillation_token = true"
    if kind == "dinov2_with_registers":
        patches += f", registers = {s.need('num_register_tokens')}"
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": ffn, "norm": f"layernorm(pre, eps = {eps})",
               "patches": f"patches({patches}, grid = {grid}"
                          f"{', antialias = true' if kind == 'dinov2_with_registers' else ''})"}
    if dinov2:
        s.stack["layer_scale"] = "true"
    if kind == "clip_vision_model":  # pre_layrnorm on the embeddings; no final norm
        s.stack |= {"embedding_norm": f"layernorm(eps = {eps})", "final_norm": "false"}
    s.comments[s.pattern[0]] = "each block's attention over the image's patches"


def _beit(s: SpecText, padding: str | None) -> None:
    """BEiT: ViT's blocks with no key bias, a 2-D relative position bias table per layer
    over the training grid (`relative_2d`), layer scale, and, with mean pooling, no final
    norm (its norm is the pooler's)."""
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    size = _square(s, "patch_size")
    grid = _square(s, "image_size") // max(size, 1)
    name = f"{s.name}_self"
    s.attentions[name] = {"d_model": str(d), "heads": str(heads), "bias": "[q, v, o]",
                                 "mask": "full"}
    if s.get("use_relative_position_bias"):
        s.attentions[name]["position"] = f"relative_2d(window = {grid})"
    if s.get("use_shared_relative_position_bias"):
        s.refuse("use_shared_relative_position_bias", "one 2-D relative table shared by every "
                 "layer is not imported yet (a table per layer is)")
    s.pattern = [name]
    positions = f", grid = {grid}" if s.get("use_absolute_position_embeddings") else ""
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{act(s, 'hidden_act', s.need('hidden_act'))}"
                      f"({s.need('intermediate_size')})",
               "norm": f"layernorm(pre, eps = {num(s.need('layer_norm_eps'))})",
               "patches": f"patches(size = {size}, channels = {s.need('num_channels')}, "
                          f"class_token = true{positions})"}
    if s.get("layer_scale_init_value", default=0) > 0:
        s.stack["layer_scale"] = "true"
    if s.get("use_mean_pooling"):
        s.stack["final_norm"] = "false"
    s.comments[name] = "each block's attention over the image's patches"


_GATED = {"silu": "swiglu", "gelu": "gelu_glu", "gelu_pytorch_tanh": "geglu",
          "gelu_new": "geglu"}


def _pixtral(s: SpecText, padding: str | None) -> None:
    """Pixtral's vision encoder over one image (transformers packs several into one sequence,
    each attending to its own patches: one image per batch row here)."""
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    rope = s.get("rope_parameters") or {}
    if rope.get("rope_type", "axial") != "axial":
        s.refuse("rope_parameters", "Pixtral's RoPE is axial")
    s.attentions["pixtral_self"] = {
        "d_model": str(d), "heads": str(heads), "bias": "false",
        "position": f"rope(theta = {num(rope.get('rope_theta', 10000.0))}, axial = true)",
        "mask": "full"}
    s.pattern = ["pixtral_self"]
    ffn = _GATED.get(s.need("hidden_act"))
    if ffn is None:
        s.refuse("hidden_act", "no such gated MLP in attndsl (silu, gelu, gelu_pytorch_tanh)")
    s.stack = {"layers": str(s.need("num_hidden_layers")),
               "ffn": f"{ffn or 'swiglu'}({s.need('intermediate_size')})",
               "norm": "rmsnorm(pre, eps = 1e-05)",
               "patches": f"patches(size = {_square(s, 'patch_size')}, channels = "
                          f"{s.need('num_channels')}, bias = false)",
               "embedding_norm": "rmsnorm(eps = 1e-05)", "final_norm": "false"}
    s.comments["pixtral_self"] = "each block's attention over the image's patches, turned by " \
                                 "their rows and columns"


def _table(t, a, cfg):
    """A checkpoint's [1, n, d] position table as attndsl's [n, d]."""
    return t.reshape(-1, t.shape[-1])


def _token(t, a, cfg):
    """A checkpoint's [1, 1, d] class token as attndsl's [d]."""
    return t.reshape(-1)


_PATCH = {"patch_embed.weight": "embeddings.patch_embeddings.projection.weight",
          "patch_embed.bias": "embeddings.patch_embeddings.projection.bias",
          "class_token": ("embeddings.cls_token", _token),
          "position_embeddings.weight": ("embeddings.position_embeddings", _table)}
_VIT_ATTN = {**linear("self_attn.q_proj", "attention.attention.query"),
             **linear("self_attn.k_proj", "attention.attention.key"),
             **linear("self_attn.v_proj", "attention.attention.value"),
             **linear("self_attn.o_proj", "attention.output.dense")}
_VIT_LAYER = {
    **_VIT_ATTN, **linear("mlp.fc1", "intermediate.dense"), **linear("mlp.fc2", "output.dense"),
    **norms({"attn_norm": "layernorm_before", "ffn_norm": "layernorm_after"})}
_VIT, _IJEPA, _DEIT = (Names("encoder.layer.{i}.", _VIT_LAYER, {
    **_PATCH, **norms({"norm": "layernorm"}), **extra}, (prefix,),
    outside=(r"pooler\..*", r"(cls|distillation)_classifier\.(weight|bias)"))
    for prefix, extra in (("vit.", {}), ("ijepa.", {}), ("deit.", {
        "distillation_token": ("embeddings.distillation_token", _token)})))


def _swiglu_width(a, cfg: dict) -> int:
    """DINOv2's SwiGLU MLP: two thirds of int(hidden_size * mlp_ratio), rounded up to a
    multiple of 8; its gate and up rows fused in `weights_in`, gate first."""
    return (int(int(cfg["hidden_size"] * cfg["mlp_ratio"]) * 2 / 3) + 7) // 8 * 8


_DINOV2_LAYER = {
    **_VIT_ATTN, **linear("mlp.fc1", "mlp.fc1"), **linear("mlp.fc2", "mlp.fc2"),
    **{f"mlp.{p}_proj.{w}": (f"mlp.weights_in.{w}", rows(start, _swiglu_width))
       for p, start in (("gate", lambda a, c: 0), ("up", _swiglu_width))
       for w in ("weight", "bias")},
    **linear("mlp.down_proj", "mlp.weights_out"),
    **norms({"attn_norm": "norm1", "ffn_norm": "norm2"}),
    "attn_scale": "layer_scale1.lambda1", "ffn_scale": "layer_scale2.lambda1"}
_DINOV2, _DINOV2_REGISTERS = (Names("encoder.layer.{i}.", _DINOV2_LAYER, {
    **_PATCH, **norms({"norm": "layernorm"}), **extra}, (prefix,),
    outside=(r"embeddings\.mask_token",))
    for prefix, extra in (("dinov2.", {}), ("dinov2_with_registers.", {
        "register_tokens": ("embeddings.register_tokens", _table)})))
# a whole CLIP or SigLIP model's text tower and heads, beside the vision tower read
_TEXT = (r"text_model\..*", r"(text|visual)_projection\.weight", r"logit_(scale|bias)")
TOWER_LAYER = {**{k: v for p in "qkv" for k, v in linear(f"self_attn.{p}_proj",
                                                    f"self_attn.{p}_proj").items()},
          **linear("self_attn.o_proj", "self_attn.out_proj"),
          **linear("mlp.fc1", "mlp.fc1"), **linear("mlp.fc2", "mlp.fc2"),
          **norms({"attn_norm": "layer_norm1", "ffn_norm": "layer_norm2"})}
_SIGLIP = Names("encoder.layers.{i}.", TOWER_LAYER, {
    "patch_embed.weight": "embeddings.patch_embedding.weight",
    "patch_embed.bias": "embeddings.patch_embedding.bias",
    "position_embeddings.weight": "embeddings.position_embedding.weight",
    **norms({"norm": "post_layernorm"})}, ("vision_model.",), outside=(r"head\..*", *_TEXT))
_CLIP = Names("encoder.layers.{i}.", TOWER_LAYER, {
    "patch_embed.weight": "embeddings.patch_embedding.weight",
    "class_token": "embeddings.class_embedding",
    "position_embeddings.weight": "embeddings.position_embedding.weight",
    **norms({"embedding_norm": "pre_layrnorm"})}, ("vision_model.",),
    outside=(r"post_layernorm\.(weight|bias)", *_TEXT))

_BEIT_LAYER = {
    **{k: v for k, v in _VIT_ATTN.items() if k != "self_attn.k_proj.bias"},
    "self_attn.relative_position_bias.weight":
        "attention.attention.relative_position_bias.relative_position_bias_table",
    **linear("mlp.fc1", "intermediate.dense"), **linear("mlp.fc2", "output.dense"),
    **norms({"attn_norm": "layernorm_before", "ffn_norm": "layernorm_after"}),
    "attn_scale": "lambda_1", "ffn_scale": "lambda_2"}
_BEIT_OUTSIDE = (r"pooler\..*", r"embeddings\.mask_token", r"lm_head\..*", r"layernorm\..*")
_BEIT, _DATA2VEC = (Names("encoder.layer.{i}.", _BEIT_LAYER,
                          {**_PATCH, **norms({"norm": "layernorm"})}, (prefix,),
                          outside=_BEIT_OUTSIDE)
                    for prefix in ("beit.", "data2vec_vision."))
_PIXTRAL = Names("transformer.layers.{i}.", {
    **{f"self_attn.{p}_proj.weight": f"attention.{p}_proj.weight" for p in "qkvo"},
    **{f"mlp.{p}_proj.weight": f"feed_forward.{p}_proj.weight" for p in ("gate", "up", "down")},
    "attn_norm.weight": "attention_norm.weight", "ffn_norm.weight": "ffn_norm.weight"},
    {"patch_embed.weight": "patch_conv.weight", "embedding_norm.weight": "ln_pre.weight"},
    ("vision_tower.", "model.vision_tower."))

_DROPOUT = "dropout, which is off at inference"
_INIT = "how untrained weights are drawn"
COMMON_INERT = {"hidden_dropout_prob": _DROPOUT, "attention_probs_dropout_prob": _DROPOUT,
           "attention_dropout": _DROPOUT, "dropout": _DROPOUT, "initializer_range": _INIT,
           "initializer_factor": _INIT}
_TYPES = {"image_size": ("int", 1), "patch_size": ("int", 1), "num_channels": ("int", 1)}
_DEFAULTS = {"num_channels": 3, "layer_norm_eps": 1e-12, "qkv_bias": True,
             "hidden_act": "gelu"}
_DINOV2_INERT = {
    **COMMON_INERT, "layerscale_value": _INIT, "drop_path_rate": "training only",
    "use_mask_token": "masked pretraining's token, which inference never reads",
    **{k: "a backbone's feature maps, outside" for k in (
        "apply_layernorm", "reshape_hidden_states", "out_features", "out_indices",
        "stage_names")}}
_BEIT_FIELDS = dict(defaults={  # (BeitConfig, Data2VecVisionConfig, 5.23)
    "num_channels": 3, "layer_norm_eps": 1e-12, "hidden_act": "gelu", "hidden_size": 768,
    "num_hidden_layers": 12, "num_attention_heads": 12,
    "intermediate_size": 3072, "image_size": 224, "patch_size": 16,
    "use_absolute_position_embeddings": False, "use_relative_position_bias": False,
    "use_shared_relative_position_bias": False, "layer_scale_init_value": 0.1,
    "use_mean_pooling": True},
    inert={**COMMON_INERT, "drop_path_rate": "training only",
           "use_mask_token": "masked pretraining's token, which inference never reads",
           "vocab_size": "the masked-image-modeling head's, outside",
           **{k: "the semantic segmentation head's, outside" for k in (
               "pool_scales", "use_auxiliary_head", "auxiliary_loss_weight",
               "auxiliary_channels", "auxiliary_num_convs", "auxiliary_concat_input",
               "semantic_loss_ignore_index", "add_fpn")},
           **{k: "a backbone's feature maps, outside" for k in (
               "out_features", "out_indices", "reshape_hidden_states", "stage_names")}},
    types={**_TYPES, "layer_scale_init_value": ("num", None),
           **dict.fromkeys(("use_absolute_position_embeddings",
                            "use_relative_position_bias",
                            "use_shared_relative_position_bias", "use_mean_pooling"),
                           ("bool", None))})
_VIT_DEFAULTS = {**_DEFAULTS, "hidden_size": 768, "num_hidden_layers": 12,
                 "num_attention_heads": 12, "intermediate_size": 3072, "image_size": 224,
                 "patch_size": 16}
_VIT_INERT = {**COMMON_INERT, "encoder_stride": "masked image modeling's decoder, outside",
              "pooler_output_size": "the pooler, outside (hidden states are the output)",
              "pooler_act": "the pooler, outside (hidden states are the output)"}
FAMILIES = [
    *(Family(kind, _read, names, {**_VIT_DEFAULTS, **own}, inert=_VIT_INERT, types=_TYPES)
      for kind, names, own in (  # (ViTConfig, ViTMSNConfig, DeiTConfig, IJepaConfig, 5.23)
          ("vit", _VIT, {}), ("vit_msn", _VIT, {"layer_norm_eps": 1e-6}),
          ("deit", _DEIT, {}), ("ijepa", _IJEPA, {}))),
    Family("dinov2", _read, _DINOV2, {  # (Dinov2Config, 5.23)
        **_DEFAULTS, "layer_norm_eps": 1e-6, "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "mlp_ratio": 4, "image_size": 224, "patch_size": 14,
        "use_swiglu_ffn": False},
        inert=_DINOV2_INERT,
        types={**_TYPES, "mlp_ratio": ("num", 0), "use_swiglu_ffn": ("bool", None)}),
    Family("dinov2_with_registers", _read, _DINOV2_REGISTERS, {  # (Dinov2WithRegistersConfig)
        **_DEFAULTS, "layer_norm_eps": 1e-6, "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "mlp_ratio": 4, "image_size": 224, "patch_size": 16,
        "use_swiglu_ffn": False, "num_register_tokens": 4},
        inert=_DINOV2_INERT,
        types={**_TYPES, "mlp_ratio": ("num", 0), "use_swiglu_ffn": ("bool", None),
               "num_register_tokens": ("int", 0)}),
    Family("siglip_vision_model", _read, _SIGLIP, {  # (SiglipVisionConfig, 5.23)
        "num_channels": 3, "layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "image_size": 224, "patch_size": 16},
        inert={**COMMON_INERT, "vision_use_head": "the pooling head, outside (hidden states are "
                                             "the output)"}, types=_TYPES),
    Family("clip_vision_model", _read, _CLIP, {  # (CLIPVisionConfig, 5.23)
        "num_channels": 3, "layer_norm_eps": 1e-5, "hidden_act": "quick_gelu",
        "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "image_size": 224, "patch_size": 32},
        inert={**COMMON_INERT, "projection_dim": "the image projection, outside"}, types=_TYPES),
    Family("beit", _beit, _BEIT, **_BEIT_FIELDS),
    Family("data2vec-vision", _beit, _DATA2VEC, **_BEIT_FIELDS),
    Family("pixtral", _pixtral, _PIXTRAL, {  # (PixtralVisionConfig, 5.23)
        "num_channels": 3, "hidden_act": "gelu", "hidden_size": 1024,
        "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
        "image_size": 1024, "patch_size": 16},
        inert={**COMMON_INERT, "head_dim": "PixtralVisionConfig derives it: hidden_size // heads",
               "image_size": "the largest image it was trained on; the grid is the image's"},
        types=_TYPES),
]
