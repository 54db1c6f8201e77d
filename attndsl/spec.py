"""The resolved spec: what the checker produces and every later stage consumes. Every default
is filled in and every name resolved, so backends never look anything up or guess."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .blocks import GATED, Ffn, Norm  # re-exported: part of the resolved spec
from .kernels import Kernel, Softmax  # re-exported: part of the resolved spec
from .masks import Mask, runtime_inputs
from .patches import Patches
from .position_spec import (  # re-exported: part of the resolved spec
    Alibi,
    Learned,
    Position,
    RelativeBias,
    RelativeLogits,
    Rope,
    ScoreBias,
    Sinusoidal,
)
from .rope_scaling import (  # re-exported: part of the resolved spec
    DynamicScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    RopeScaling,
    YarnScaling,
)
from .shapes import MAX_LENGTH
from .source import Source, Span

__all__ = [
    "GATED",
    "MAX_LENGTH",
    "Alibi",
    "Attention",
    "DynamicScaling",
    "Ffn",
    "Layer",
    "Learned",
    "LinearScaling",
    "Llama3Scaling",
    "LongRopeScaling",
    "Norm",
    "PerLayerInputs",
    "Position",
    "Program",
    "RelativeBias",
    "RelativeLogits",
    "Rope",
    "RopeScaling",
    "ScoreBias",
    "Sinusoidal",
    "Softmax",
    "Sparsity",
    "Transformer",
    "YarnScaling",
    "attentions_of",
    "encoder_of",
    "input_names",
    "is_lm",
    "memory_reader",
    "output_name",
    "top_layers",
]


# MAX_LENGTH (from shapes): the longest sequence an exported model is built for




@dataclass(frozen=True)
class Sparsity:
    mode: str  # dense | block | auto
    block: int | None = None

    def __str__(self) -> str:
        return f"block({self.block})" if self.mode == "block" else self.mode


@dataclass(frozen=True)
class Attention:
    name: str
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    value_dim: int
    kind: str  # self | cross
    memory_dim: int  # width of keys/values' input: d_model for self attention
    bias: tuple[str, ...]  # the projections with a bias, of q, k, v, o
    out_proj: bool
    scale: float
    position: Position
    kernel: Kernel
    mask: Mask
    sparsity: Sparsity
    dropout: float
    # the mechanisms set by their keys (`attndsl/mechanisms/`), (key, value) in the order
    # they apply
    mechanisms: tuple[tuple[str, Any], ...] = ()
    # a projection form in place of q_proj, k_proj and v_proj (`mechanisms.projection_of`:
    # `key = name(...)`), or None
    projection: Any = None
    # where its `kind` and `mask` are written (diagnostics found after checking: decoding)
    spans: tuple[tuple[str, Span], ...] = field(default=(), compare=False, repr=False)
    # a core selector's variants, each with the `attention` it runs, projections shared
    # (`mechanisms.selector_of`; empty: this one core)
    variants: tuple[Any, ...] = ()
    # o_proj's output width (`out_dim`), where it differs from d_model (Zamba2's shared
    # attention reads [x ; e], 2 d_model wide, and writes d_model); 0: d_model
    out_dim: int = 0

    @property
    def width(self) -> int:
        """The width of its output: o_proj's (`out_dim`), else d_model."""
        return self.out_dim or self.d_model

    def mechanism(self, key: str) -> Any:
        """The value of the mechanism `key` (`attndsl/mechanisms/`), or None where unset."""
        return dict(self.mechanisms).get(key)

    @property
    def groups(self) -> int:
        """Query heads per kv head: query head h reads kv head h // groups."""
        return self.heads // self.kv_heads

    @property
    def runtime_inputs(self) -> tuple[str, ...]:
        if self.variants:
            names = {n for v in self.variants for n in v.attention.runtime_inputs}
            return tuple(n for n in RUNTIME_INPUTS if n in names)
        names = runtime_inputs(self.mask)
        if self.kind == "cross" and "segment_ids" in names:  # `document`: the memory's ids too
            names = (*names, "memory_segment_ids")
        return names

    @property
    def cores(self) -> tuple[Attention, ...]:
        """The attention of each core it may run: its variants', or itself."""
        return tuple(v.attention for v in self.variants) or (self,)

    def span(self, key: str) -> Span | None:
        return dict(self.spans).get(key)


@dataclass(frozen=True)
class PerLayerInputs:
    """`ple(width = P, vocab = V, activation = gelu_tanh)`: Gemma 4's per-layer inputs."""

    width: int
    vocab: int
    activation: str = "gelu_tanh"


@dataclass(frozen=True)
class Side:
    """`side(attention = a, ffn = mlp, layers = [i, ...])`: Zamba's shared transformer block
    beside the listed blocks' own (docs/LANGUAGE.md): over [x ; e], norm, attention a, norm,
    the MLP and a projection, its output s joining the block's attention input."""

    attention: Attention
    ffn: Ffn
    layers: tuple[int, ...]


@dataclass(frozen=True)
class HeadTransform:
    """`dense(activation = gelu, norm = layernorm(eps = 1e-12), bias = true)`: the hidden
    states through a d_model x d_model projection, its activation and a norm before the LM
    head (BERT's and ModernBERT's prediction head)."""

    activation: str
    norm: Norm
    bias: bool = True


@dataclass(frozen=True)
class Transformer:
    """A stack of `layers` blocks; block i uses attentions[i % len(attentions)] (a layer
    pattern, such as Gemma's sliding and global layers)."""

    name: str
    attentions: tuple[Attention, ...]
    layers: int
    ffn: Ffn | None  # None: `ffn = none`, no block has a feed-forward (a mixer-only stack)
    norm: Norm
    placement: str  # pre | post | sandwich | output
    residual: str  # sequential | parallel | normed
    shared_norm: bool  # parallel residual with one norm for both branches (GPT-J)
    shared_relative_bias: bool  # one T5 table for every layer (T5)
    dropout: float
    # a language model: token ids in (embed_tokens, times embedding_scale), logits out
    # (lm_head, or embed_tokens itself when tied)
    vocab: int | None = None
    tied: bool = False
    embedding_scale: float = 1.0
    # the mechanisms its head applies to the logits, last: (mechanism key, value) in order
    # (`mechanisms.HEADS`, each set by its transformer key)
    logit_mechanisms: tuple[tuple[str, Any], ...] = ()
    # Granite: each sublayer's output times residual_scale before it joins the residual, or
    # "depth" (Beam): the n-th sublayer's output times 1/sqrt(n) and the residual times
    # sqrt((n - 1)/n); logits times logit_scale (Cohere; Granite's 1 / logits_scaling) before
    # the head's mechanisms; head_bias: the LM head adds lm_head.bias (Phi-2)
    residual_scale: float | str = 1.0
    # MiniMax (`residual = normed(alpha)`): each sublayer's residual is its normed input times
    # residual_alpha, y = alpha norm(x) + f(norm(x))
    residual_alpha: float = 1.0
    logit_scale: float = 1.0
    head_bias: bool = False
    # BLOOM, BERT: a norm of the token embeddings (after embedding_scale and the absolute
    # positions), before the first block; its tensors `embedding_norm.*`
    embedding_norm: Norm | None = None
    # False: layer 0's attention reads its input unnormed, no `layers.0.attn_norm.*`
    # (ModernBERT's Identity attn_norm on its first layer, whose input the embedding norm
    # has normed); pre norms, sequential residual
    first_attn_norm: bool = True
    # a feed-forward form other than one MLP (`mechanisms.ffn_of`), made of MLPs of the form
    # `ffn`, in every block but its dense_layers, or None
    feed_forward: Any = None
    # the last kv_shared_layers blocks reuse the keys and values (rotated, normed, cached) of
    # the last earlier block of their attention (Gemma 4's num_kv_shared_layers): no k or v
    # projections or cache of their own
    kv_shared_layers: int = 0
    # each block's output times a learned scalar of its own, layers.{i}.layer_scalar (Gemma 4)
    layer_scalar: bool = False
    # per-layer inputs (`ple(width = P)`, Gemma 4's per-layer embeddings), or None
    per_layer_inputs: PerLayerInputs | None = None
    # the hidden states' projection, activation and norm before the LM head, or None
    head_transform: HeadTransform | None = None
    # Inkling's: each block's feed-forward output u becomes u + conv(u), a causal depthwise
    # convolution over the last `ffn_conv` tokens (layers.{i}.mlp_sconv.conv1d.weight), or None
    ffn_conv: int | None = None
    # blocks in pairs (LongCat-Flash's shortcut): block 2p's feed-forward input through this
    # MLP (`shortcut`) or feed-forward form (`shortcut_form`, made of `shortcut` MLPs), its
    # output added to block 2p + 1's; weights layers.{2p}.shortcut_mlp.*
    shortcut: Ffn | None = None
    shortcut_form: Any = None
    # blocks without a feed-forward (`attention_only`: Nemotron-H's mixer layers that no MLP
    # layer follows): norm, attention, residual
    attention_only: tuple[int, ...] = ()
    # block i's norm placement (`placements`: OLMo Hybrid's pre-norm recurrent blocks and
    # output-norm softmax blocks) is placements[i % n]; () : `placement` for every block
    placements: tuple[str, ...] = ()
    # an attention every block runs beside its own, on the same normed input, their outputs
    # summed (`parallel`: Falcon-H1's state-space mixer beside its attention), weights
    # layers.{i}.parallel_attn.*; or None
    parallel: Attention | None = None
    # a side block beside the listed blocks (`side`: Zamba2's shared transformer block),
    # weights layers.{i}.side_*; or None
    side: Side | None = None
    # a decoder's cross attention (`cross`): every block attends over the memory rows (an
    # encoder's output) after its self attention, weights layers.{i}.cross_attn.* and its
    # norm's layers.{i}.cross_attn_norm.*; its mask's padding reads `memory_lengths`; or None
    cross: Attention | None = None
    # an encoder-decoder model (`encoder = e`, a decoder with `cross`): source token ids are
    # embedded with this stack's embed_tokens (times its embedding_scale) and run through the
    # stack e, whose output is the memory (`encoder_of`); its tensors are `encoder.*`; a
    # generated target starts at token `decoder_start`
    encoder: Transformer | None = None
    decoder_start: int = 0
    # what the encoder reads: `tokens` (source ids, embedded as above) or `states` (hidden
    # states x [B, S, d], Whisper's after its convolutional stem)
    encoder_input: str = "tokens"
    # False: token ids in, hidden states y out, no LM head (an encoder as its model runs it)
    head: bool = True
    # a vision stack: pixel_values in, its patches' rows (`patches.Patches`) through the blocks
    patches: Patches | None = None
    # DINOv2's layer scale (layers.{i}.attn_scale, ffn_scale); no final norm (CLIP's vision)
    layer_scale: bool = False
    final_norm: bool = True

    def layer_placement(self, i: int) -> str:
        """Where block i's norms sit (pre, post, sandwich or output)."""
        return self.placements[i % len(self.placements)] if self.placements else self.placement

    def has_ffn(self, i: int) -> bool:
        """Whether block i has a feed-forward sublayer."""
        return self.ffn is not None and i not in self.attention_only

    def kv_owner(self, i: int) -> int | None:
        """The block whose keys and values block i reuses (kv_shared_layers), or None."""
        first = self.layers - self.kv_shared_layers
        if i < first:
            return None
        name = self.layer_attention(i).name
        return next((j for j in range(first - 1, -1, -1)
                     if self.layer_attention(j).name == name), None)

    def layer_feed_forward(self, i: int) -> Any:
        """Block i's feed-forward form, or None where it runs one MLP (`layer_ffn(i)`)."""
        f = self.feed_forward
        return None if f is None or i in f.dense_layers else f

    def layer_ffn(self, i: int) -> Ffn:
        """Block i's MLP: the form its feed-forward form is made of, else the one it runs."""
        f = self.feed_forward
        return f.dense if f is not None and i in f.dense_layers else self.ffn

    @property
    def attention(self) -> Attention:  # the first layer's: the stack's width, kind, positions
        return self.attentions[0]

    def layer_attention(self, i: int) -> Attention:
        return self.attentions[i % len(self.attentions)]

    @property
    def d_model(self) -> int:
        return self.attention.d_model

    @property
    def runtime_inputs(self) -> tuple[str, ...]:
        names = {n for a in attentions_of(self) if a is not self.cross
                 for n in a.runtime_inputs}
        if self.cross is not None:  # the memory's padding: its own input
            names |= {CROSS_INPUTS.get(n, n) for n in self.cross.runtime_inputs}
        return tuple(n for n in RUNTIME_INPUTS if n in names)


Layer = Attention | Transformer
# the runtime inputs masks read, in the order of the graph's inputs
RUNTIME_INPUTS = ("key_lengths", "memory_lengths", "segment_ids", "memory_segment_ids")
# a decoder stack's cross attention's runtime inputs by its mask's names (`masks.ROLES`, the
# other way round)
CROSS_INPUTS = {"key_lengths": "memory_lengths"}


def attentions_of(spec: Layer) -> tuple[Attention, ...]:
    """The attentions a layer runs: a stack's pattern (and its `parallel`, `side` and `cross`
    attentions), or the attention itself."""
    if isinstance(spec, Transformer):
        return spec.attentions + tuple(a for a in (spec.parallel, spec.side and
                                                   spec.side.attention, spec.cross)
                                       if a is not None)
    return (spec,)


def encoder_of(spec: Transformer) -> Transformer:
    """The encoder of an encoder-decoder model as it runs (named `<model>.encoder`): its
    stack, taking the source's token ids through the model's embedding (vocab,
    embedding_scale), without an LM head."""
    if spec.encoder_input == "states" or spec.encoder.vocab is not None:  # its input as
        return replace(spec.encoder, name=f"{spec.name}.encoder", head=False)  # given, or
        # its own token embedding (Marian's unshared)
    return replace(spec.encoder, name=f"{spec.name}.encoder", vocab=spec.vocab,
                   embedding_scale=spec.embedding_scale, tied=False, head=False)


def memory_reader(spec: Layer) -> Attention | None:
    """The attention that reads memory rows: a cross attention, or a decoder stack's `cross`;
    None where the layer reads none."""
    if isinstance(spec, Transformer):
        return spec.cross
    return spec if spec.kind == "cross" else None


def input_names(spec: Layer) -> tuple[str, ...]:
    """Graph inputs, in this order: x (input_ids for a language model, pixel_values for a
    vision stack), memory (cross attention, a decoder stack), key_lengths, memory_lengths,
    segment_ids, memory_segment_ids, position_ids (multimodal RoPE's, `reads_streams`)."""
    image = getattr(spec, "patches", None) is not None  # (its grid gives the streams)
    first = "input_ids" if is_lm(spec) else "pixel_values" if image else "x"
    return (first, *(["memory"] if memory_reader(spec) else []), *spec.runtime_inputs,
            *(["position_ids"] if reads_streams(spec) and not image else []))


def reads_streams(spec: Layer) -> int:
    """How many position streams its positions read, position_ids [n, B, L], in one pass as in
    decoding: 3 (`mrope`: time, height, width), 2 (row, column: `axial`, `relative_2d`), 0."""
    return max((getattr(c.position, "streams", 0) for a in attentions_of(spec)
                for c in a.cores), default=0)


def output_name(spec: Layer) -> str:
    """The graph's output: logits of a language model, else y (an encoder's hidden states)."""
    return "logits" if is_lm(spec) and spec.head else "y"


def is_lm(spec: Layer) -> bool:
    return isinstance(spec, Transformer) and spec.vocab is not None


@dataclass(frozen=True)
class Program:
    """A checked file: its layers by name, in source order, and the source they came from."""

    source: Source
    layers: dict[str, Layer] = field(default_factory=dict)


def top_layers(layers: dict[str, Layer]) -> list[str]:
    """The layers no other layer uses (a stack's attentions are used by it), in source order:
    what a file is for, such as an imported checkpoint's stack."""
    used = {a.name for layer in layers.values() if isinstance(layer, Transformer)
            for a in (*attentions_of(layer), *(layer.encoder,) * bool(layer.encoder))}
    return [name for name in layers if name not in used]
