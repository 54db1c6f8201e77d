"""ModernBERT's decoder (`modernbert-decoder`): ModernBERT's layers run causally. Full layers
and sliding ones (`layer_types`, a window of local_attention // 2 keys) each rotate q and k
with their own RoPE base (`rope_parameters` per kind, else global_rope_theta and
local_rope_theta); LayerNorms (bias with norm_bias) before each sublayer, but layer 0's
attention reads the embeddings as they are (its attn_norm is an Identity: the embedding norm
has normed them); a GLU MLP whose fused `Wi` holds the activated half, then the gate; a final
norm. As a language model: the token embeddings LayerNormed (`embedding_norm`), and the LM
head ModernBERT's prediction head (dense, `classifier_activation`, LayerNorm: `head_transform`)
before the decoder (tied to the embeddings by default, its bias with decoder_bias)."""

from __future__ import annotations

from .base import Family
from .names import Names, linear, rows
from .rope import num, rope
from .text import SpecText, act, mask, period

__all__ = ["FAMILIES"]

# hidden_activation -> the gated MLP computing act(Wi's first half) * Wi's second half
_GLU = {"gelu": "gelu_glu", "gelu_new": "geglu", "gelu_pytorch_tanh": "geglu",
        "gelu_fast": "geglu", "silu": "swiglu", "swish": "swiglu", "relu2": "relu2_glu"}
_KINDS = {"sliding_attention": "modernbert_local", "full_attention": "modernbert_global"}


def _read(s: SpecText, padding: str | None) -> None:
    cfg = s.cfg
    d, heads = s.need("hidden_size"), s.need("num_attention_heads")
    layers = s.need("num_hidden_layers")
    every = s.get("global_attn_every_n_layers", default=3)  # its config's older field
    types = cfg.get("layer_types") or [
        "full_attention" if i % every == 0 else "sliding_attention" for i in range(layers)]
    other = [t for t in dict.fromkeys(types) if t not in _KINDS]
    if other:
        s.refuse("layer_types", "ModernBERT's layers are sliding_attention or full_attention; "
                                f"attndsl does not import layer kind `{other[0]}` for it")
        return
    # ModernBertDecoderConfig's sliding_window: local_attention // 2 (-1 when null)
    local = cfg.get("local_attention")
    window = local // 2 if local else -1
    if "sliding_attention" in types and window < 1:
        s.refuse("local_attention", "sliding layers need local_attention >= 2 (their window "
                                    "is local_attention // 2 keys)")
        window = 1
    params = cfg.get("rope_parameters") or {}
    legacy = {"full_attention": s.get("global_rope_theta", default=160000.0),
              "sliding_attention": s.get("local_rope_theta", default=10000.0)}
    head_dim = d // max(heads, 1)
    for kind in dict.fromkeys(types):
        kind_params = {"rope_type": "default", **(cfg.get("rope_scaling") or {}),
                       **(params.get(kind) or {})}
        kind_params.setdefault("rope_theta", legacy[kind])
        slide = kind == "sliding_attention"
        name = _KINDS[kind]
        s.attentions[name] = {
            "d_model": str(d), "heads": str(heads),
            "bias": "true" if cfg.get("attention_bias") else "false",
            "position": rope(s, kind_params, head_dim),
            "mask": mask(True, padding, window if slide else None)}
        s.comments[name] = (f"local_attention = {local}: a window of {window} keys"
                            if slide else "a global layer")
    s.pattern = [_KINDS[k] for k in period(types)]
    activation = s.need("hidden_activation")
    ffn = _GLU.get(activation)
    if ffn is None:
        s.refuse("hidden_activation", "no such activation in attndsl for a gated MLP (gelu, "
                                      "gelu_pytorch_tanh, silu, relu2)")
        ffn = "gelu_glu"
    bias = ", bias = true" if cfg.get("mlp_bias") else ""
    ln = (f"eps = {num(s.need('norm_eps'))}, bias = "
          f"{'true' if cfg.get('norm_bias') else 'false'}")  # every LayerNorm's
    s.stack = {"layers": str(layers), "ffn": f"{ffn}({s.need('intermediate_size')}{bias})",
               "norm": f"layernorm(pre, {ln})", "first_attn_norm": "false"}
    norm = f"layernorm({ln})"
    s.head["embedding_norm"] = norm  # (a language model: tok_embeddings, then their norm)
    head_act = act(s, "classifier_activation", s.need("classifier_activation"))
    if head_act == "relu2":
        s.refuse("classifier_activation", "the prediction head's activation is gelu, a tanh "
                                          "GELU, relu or silu")
    s.head["head_transform"] = (f"dense(norm = {norm}, activation = {head_act}, bias = "
                                f"{'true' if cfg.get('classifier_bias') else 'false'})")
    if cfg.get("decoder_bias"):
        s.head["head_bias"] = "true"


def _half(part: int):
    """Wi's rows: the activated half (0, attndsl's gate_proj), then the gate (1, up_proj)."""
    return rows(lambda a, cfg: part * cfg["intermediate_size"],
                lambda a, cfg: cfg["intermediate_size"])


_MODERNBERT = Names("layers.{i}.", {
    **{k: v for p in "qkv" for k, v in linear(f"self_attn.{p}_proj", f"attn.{p}_proj").items()},
    **linear("self_attn.o_proj", "attn.Wo"),
    **linear("attn_norm", "attn_norm"), **linear("ffn_norm", "mlp_norm"),
    **{f"mlp.{ours}.{w}": (f"mlp.Wi.{w}", _half(i)) for i, ours in enumerate(("gate_proj",
                                                                                "up_proj"))
       for w in ("weight", "bias")},
    **linear("mlp.down_proj", "mlp.Wo")},
    {"norm.weight": "final_norm.weight", "norm.bias": "final_norm.bias",
     "embed_tokens.weight": "embeddings.tok_embeddings.weight",
     **linear("embedding_norm", "embeddings.norm"),
     **linear("head_transform.dense", "lm_head.dense"),
     **linear("head_transform.norm", "lm_head.norm"), **linear("lm_head", "decoder")},
    ("model.",))

FAMILIES = [
    Family("modernbert-decoder", _read, _MODERNBERT, {  # ModernBertDecoderConfig (5.23)
        "hidden_size": 768, "intermediate_size": 1152, "num_hidden_layers": 22,
        "num_attention_heads": 12, "hidden_activation": "gelu", "norm_eps": 1e-5,
        "norm_bias": False, "attention_bias": False, "mlp_bias": False,
        "local_attention": 128, "tie_word_embeddings": True, "decoder_bias": True,
        "classifier_bias": False, "classifier_activation": "gelu"},
        inert={"mlp_dropout": "dropout, which is off at inference",
               "initializer_cutoff_factor": "how untrained weights are drawn; a checkpoint "
                                            "brings its own",
               "cls_token_id": "a token id for tokenization",
               "sliding_window": "ModernBertDecoderConfig recomputes it from local_attention, "
                                 "which the import reads"}, lm=True),
]
