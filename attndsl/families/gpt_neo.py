"""GPT-Neo: GPT-2's block with nn.Linear layers, q/k/v without biases, unscaled scores
(q.k, no 1/sqrt(head_dim)), and layers of two kinds from `attention_types`: global (causal)
and local (causal within `window_size` keys)."""

from __future__ import annotations

from .base import Family
from .names import Names, linear, norms
from .rope import num
from .text import SpecText, act, mask, period

__all__ = ["FAMILIES"]

_KINDS = ("global", "local")


def _layer_kinds(s: SpecText, layers: int) -> list[str]:
    """attention_types expanded as GPTNeoConfig expands it ([[kinds, repeats], ...] ->
    kinds * repeats, one after another), one kind per layer."""
    types = s.get("attention_types", default=[[list(_KINDS), 12]])
    try:
        kinds = [k for kinds, n in types for _ in range(n) for k in kinds]
    except (TypeError, ValueError):
        kinds = None
    if kinds is None or len(kinds) != layers or not all(k in _KINDS for k in kinds):
        s.refuse("attention_types", f"a list of [[kinds, repeats], ...] giving one of "
                                    f"{', '.join(_KINDS)} to each of the {layers} layers is needed")
        return ["global"] * layers
    return kinds


def _read(s: SpecText, padding: str | None) -> None:
    d, heads = s.need("hidden_size"), s.need("num_heads")
    layers = s.need("num_layers")
    window = s.need("window_size")
    kinds = _layer_kinds(s, layers)
    for kind in dict.fromkeys(kinds):
        name = f"gpt_neo_{kind}"
        s.attentions[name] = {
            "d_model": str(d), "heads": str(heads), "bias": "[o]", "scale": "1",
            "mask": mask(True, padding, window if kind == "local" else None)}
        if kind == "local":
            s.comments[name] = (f"window_size = {window}: each query sees itself and the "
                                f"{window - 1} keys before it")
    s.pattern = [f"gpt_neo_{k}" for k in period(kinds)]
    # the token embedding of a language model comes with its positions (a stack of hidden
    # states takes them already added, as the blocks do)
    s.head_attention["position"] = \
        f"learned({s.get('max_position_embeddings', default=2048)})"  # GPTNeoConfig's default
    hidden = s.get("intermediate_size") or 4 * d
    s.stack = {"layers": str(layers),
               "ffn": f"{act(s, 'activation_function', s.need('activation_function'))}({hidden})",
               "norm": f"layernorm(pre, eps = {num(s.need('layer_norm_epsilon'))})"}


_GPT_NEO = Names("h.{i}.", {
    **{f"self_attn.{p}_proj.weight": f"attn.attention.{p}_proj.weight" for p in "qkv"},
    **linear("self_attn.o_proj", "attn.attention.out_proj"),
    **linear("mlp.fc1", "mlp.c_fc"), **linear("mlp.fc2", "mlp.c_proj"),
    **norms({"attn_norm": "ln_1", "ffn_norm": "ln_2"})},
    {**norms({"norm": "ln_f"}), "embed_tokens.weight": "wte.weight",
     "position_embeddings.weight": "wpe.weight", "lm_head.weight": "lm_head.weight"},
    ("transformer.",))

# transformers' defaults (GPTNeoConfig, 5.23) for the fields the import reads
FAMILIES = [
    Family("gpt_neo", _read, _GPT_NEO, {
        "hidden_size": 2048, "num_layers": 24, "num_heads": 16,
        "window_size": 256, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
        "tie_word_embeddings": True},
        inert={"attention_layers": "derived by GPTNeoConfig from attention_types, which the "
                                   "import reads",
               "embed_dropout": "dropout, which is off at inference",
               "resid_dropout": "dropout, which is off at inference"},
        lm=True),
]
