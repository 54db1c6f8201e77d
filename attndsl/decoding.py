"""Decoding: what a decoding export needs of a spec, and greedy generation with ONNX Runtime
alone (`attndsl generate`); the onnxruntime-genai folder is `genai.py`.

A decoding model (docs/LANGUAGE.md, Decoding) takes the new tokens (input_ids, or x for a
stack without a vocabulary), an int64 attention_mask over cache and new tokens (0: padding),
position_ids of the new tokens and each layer's past keys and values; it returns the logits
(or y) and each layer's present keys and values: the past with the new ones appended."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .dtypes import from_ort, numpy_dtype
from .errors import Diagnostic, SpecError, UsageError
from .masks import (
    Document,
    Full,
    Padding,
    Prefix,
    Random,
    lookahead,
    primitives,
    render,
    runtime_inputs,
)
from .mechanisms import kernel_of, selector_of
from .spec import (
    Alibi,
    Attention,
    Layer,
    Rope,
    ScoreBias,
    attentions_of,
    is_lm,
)
from .usage import check_token_ids

__all__ = ["Generation", "cache_layout", "check_decodable", "first_past", "generate",
           "generate_layer", "padded", "positions_of"]


def check_decodable(spec: Layer) -> None:
    """SpecError, located at the attentions' definitions, unless every attention of `spec` can
    decode against a cache: self attention without segment ids or `random`, with a mask where
    no query sees a later key (`masks.lookahead`); cross attention with a mask of the key's
    index alone and no positions between queries and memory rows."""
    attns = attentions_of(spec)
    problems = [p for p in (_blocker(a) for a in dict.fromkeys(attns)) if p is not None]
    if getattr(spec, "patches", None) is not None:  # (an encoder of images)
        problems.insert(0, Diagnostic(f"`{spec.name}` is a vision stack: it reads a whole "
                                      "image at once and has no decoding form", None,
                                      hint="compile it without --decode"))
    if not getattr(spec, "head", True):  # (a text encoder: CLIP's)
        problems.insert(0, Diagnostic(f"`{spec.name}` has no LM head (`lm_head = false`): "
                                      "it returns hidden states, and decoding makes tokens "
                                      "from logits", None, hint="compile it without --decode"))
    if problems:
        raise SpecError(problems)


def _blocker(a: Attention) -> Diagnostic | None:
    selector = selector_of(a.variants)
    if selector is not None:
        why, hint = selector.undecodable
        return Diagnostic(f"`{a.name}` {why}", a.span(selector.key), hint=hint)
    kernel = kernel_of(a.kernel)
    if kernel is not None and kernel.undecodable:
        return Diagnostic(f"`{a.name}` uses {kernel.described}, {kernel.undecodable}",
                          a.span("kernel"), hint="decode with `kernel = softmax`")
    if a.kind == "cross":
        return _cross_blocker(a)
    if getattr(a.position, "streams", 0) == 2:  # (axial RoPE, relative_2d)
        return Diagnostic(f"`{a.name}` reads each token's row and column in an image's grid, "
                          "which a growing cache has no place for", a.span("position"),
                          hint="decode with 1-D positions")
    if isinstance(a.position, Alibi) and a.position.rounding == "bfloat16":
        return Diagnostic(f"`{a.name}` rounds ALiBi's positions to bfloat16, which a cache "
                          "of left-padded rows would round at other indices than one pass",
                          a.span("position"), hint="decode with alibi(rounding = float32)")
    if "segment_ids" in runtime_inputs(a.mask):
        return Diagnostic(f"`{a.name}`'s mask reads segment ids (`document`), which a decoding "
                          "model does not take", a.span("mask"),
                          hint="decoding models take attention_mask; pack documents apart")
    if any(isinstance(m, Random) for m in primitives(a.mask)):
        return Diagnostic(f"`{a.name}`'s mask draws `random` key blocks, whose count depends "
                          "on the whole sequence's length: a cache cannot know it",
                          a.span("mask"), hint="decode with a mask without `random`")
    found = lookahead(a.mask)
    if found is None:
        return None
    q, k = found
    return Diagnostic(f"`{a.name}` cannot decode: its mask lets query {q} see key {k}, which "
                      "comes after it (a cache holds only earlier keys)", a.span("mask"),
                      hint="decoding needs a mask where no query sees a later key: "
                           "`causal & ...`")


# masks that read only the key's index: a cross layer's query has no place among the memory's
# keys, so its decoding form evaluates these alone
_KEY_ONLY = (Full, Prefix, Padding)


def _cross_blocker(a: Attention) -> Diagnostic | None:
    """Cross attention decodes against the memory's keys and values, cached once: its mask
    may read the key's index only, and no position scheme may relate queries to memory rows."""
    found = next((m for m in primitives(a.mask) if not isinstance(m, _KEY_ONLY)), None)
    if isinstance(found, Document):
        return Diagnostic(f"`{a.name}`'s mask reads segment ids (`document`), which a decoding "
                          "model does not take", a.span("mask"),
                          hint="decode cross attention with `full`, `padding` or `prefix(n)` "
                               "and their combinations")
    if found is not None:
        return Diagnostic(f"`{a.name}` is cross attention with a mask that reads the query's "
                          f"index (`{render(found)}`): decoding places new tokens after a cache "
                          "of memory rows, where a query has no index among the keys",
                          a.span("mask"), hint="decode cross attention with `full`, `padding` "
                                               "or `prefix(n)` and their combinations")
    if isinstance(a.position, Rope | ScoreBias):
        return Diagnostic(f"`{a.name}` is cross attention with positions relating queries to "
                          "memory rows; its decoding form has none", a.span("position"),
                          hint="decode cross attention without rotary or score-bias "
                               "positions (as Whisper, T5 and BART do)")
    kernel = kernel_of(a.kernel)
    if kernel is not None and kernel.cross_undecodable:
        return Diagnostic(f"`{a.name}` is cross attention with {kernel.described}, "
                          f"{kernel.cross_undecodable}", a.span("kernel"),
                          hint="decode cross attention with `kernel = softmax`")
    return None


def first_past(batch: int, dims: Sequence) -> list[int]:
    """The shape of a first call's past for an input of `dims` (an ONNX input's, or an IR
    type's): `batch` rows, 0 along a symbolic length (an empty cache), static sizes kept (a
    fixed-size state such as a recurrent kernel's, zeros)."""
    return [batch] + [d if isinstance(d, int) else 0 for d in dims[1:]]


def positions_of(mask: np.ndarray) -> np.ndarray:
    """position_ids of every slot from an attention mask (B, S): the count of real tokens
    before it (left padding shifts nothing), 1 at padding, as Hugging Face's generate."""
    pos = np.cumsum(mask, axis=-1) - 1
    return np.where(mask == 0, 1, pos).astype(np.int64)


def text_streams(positions: np.ndarray, rank: int) -> np.ndarray:
    """position_ids as a model takes them: (B, n), or, for one whose multimodal RoPE reads
    three streams (an input of rank 3), a text token's time, height and width positions,
    which are all its position (3, B, n)."""
    if rank == 3:
        return np.ascontiguousarray(np.broadcast_to(positions, (3, *positions.shape)))
    return positions


def padded(prompts: Sequence[Sequence[int]], pad: int = 0,
           side: str = "left") -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask), both int64 (B, longest prompt): prompts aligned right
    (`left` padding, a growing cache's) or left (`right`, an in-place cache's)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise UsageError("every prompt needs at least one token id")
    n = max(len(p) for p in prompts)
    ids = np.full((len(prompts), n), pad, dtype=np.int64)
    mask = np.zeros((len(prompts), n), dtype=np.int64)
    for i, p in enumerate(prompts):
        at = slice(n - len(p), n) if side == "left" else slice(0, len(p))
        ids[i, at] = p
        mask[i, at] = 1
    return ids, mask


@dataclass
class Generation:
    """Greedy tokens per prompt (the new ones only, stopped after eos), and timings."""

    tokens: list[list[int]]
    first_token_s: float  # prefill: the prompt in, the first new token out
    step_s: list[float] = field(default_factory=list)  # each later token

    @property
    def ms_per_token(self) -> float:
        return 1000.0 * float(np.mean(self.step_s)) if self.step_s else float("nan")


def generate(session, prompts: Sequence[Sequence[int]], max_new: int, *,
             eos: Sequence[int] = (), pad: int = 0,
             progress: Callable[[int, int], None] | None = None,
             memory: dict[str, np.ndarray] | None = None) -> Generation:
    """Greedy decoding with one ONNX Runtime session of a decoding model: the prompts in one
    call, then one token per call against the cache. A sequence stops at an eos token
    (included); the batch stops when all have, or after `max_new` tokens.

    A growing-cache model takes the prompts left-padded and returns each present as the next
    past. An in-place model (metadata attndsl.kv_cache = in_place) takes them right-padded and
    one [B, kv_heads, longest prompt + max_new, head_dim] buffer per cache, bound as both past
    and present (I/O binding), so nothing is copied. A decoder over memory rows (`memory`:
    them and their lengths, `seq2seq.generate_seq2seq`) takes them on its first call, then
    none."""
    if max_new < 1:
        raise UsageError(f"--max-new must be at least 1, found {max_new}")
    names = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    if "input_ids" not in names or outputs[0] != "logits":
        raise UsageError("generate needs a decoding language model (input_ids in, logits "
                         "out): compile a stack with `vocab` using --export genai or --decode")
    if "memory" in names and memory is None:  # (a decoder over an encoder's output)
        raise UsageError("this model is a decoder over memory rows (its blocks' `cross` "
                         "attention): generate it with its encoder\n"
                         "  = help: `attndsl generate <name>.decode.onnx --encoder "
                         "<name>.encoder.onnx --prompt-ids <source ids>`")
    if not any(n.startswith("past_key_values.") for n in names):
        raise UsageError(
            "this model is the one-pass form of a language model: it has no KV cache "
            "(past_key_values.* inputs), so generate would recompute every token\n"
            "  = help: compile its decoding form: `attndsl compile SPEC --export genai` (a "
            "folder for onnxruntime-genai) or `--export onnx --decode`")
    from .run import vocab_of

    vocab = vocab_of(session)
    if vocab is not None:  # before ONNX Runtime's Gather fails, or wraps a negative id
        check_token_ids(prompts, vocab, "the prompts")
    padded(prompts)  # UsageError for no prompt or an empty one
    meta = session.get_modelmeta().custom_metadata_map
    longest = max(len(p) for p in prompts) + max_new - 1  # tokens the last call holds
    if "attndsl.max_total_length" in meta and longest > int(meta["attndsl.max_total_length"]):
        raise UsageError(
            f"this model holds at most {meta['attndsl.max_total_length']} tokens (the context "
            f"length it was compiled for: its rotary tables), and the longest prompt plus "
            f"--max-new needs {longest}\n  = help: ask for fewer new tokens, or compile with "
            "a larger --context-length")
    if meta.get("attndsl.kv_cache") == "in_place":
        step = _InPlace(session, prompts, max_new, pad)
    else:
        step = _Growing(session, prompts, pad, memory)
    B = len(prompts)
    done = np.zeros(B, dtype=bool)
    out: list[list[int]] = [[] for _ in range(B)]
    times: list[float] = []
    for i in range(max_new):
        start = time.perf_counter()
        nxt = step.next_tokens()
        times.append(time.perf_counter() - start)
        for b in range(B):
            if not done[b]:
                out[b].append(int(nxt[b]))
                done[b] = int(nxt[b]) in eos
        if progress is not None:
            progress(i + 1, max_new)
        if done.all() or i + 1 == max_new:
            break
        step.append(nxt)
    return Generation(out, times[0], times[1:])


class _Growing:
    """Left-padded prompts; each call's presents are the next call's pasts."""

    def __init__(self, session, prompts: Sequence[Sequence[int]], pad: int,
                 memory: dict[str, np.ndarray] | None = None):
        self.session = session
        self.memory = dict(memory or {})  # a decoder's memory rows: the first call's alone
        self.ids, self.mask = padded(prompts, pad)
        inputs = {i.name: i for i in session.get_inputs()}
        self.past = {n: np.zeros(first_past(len(prompts), i.shape), dtype=_ort_float(i.type))
                     for n, i in inputs.items() if n.startswith("past_key_values.")}
        self.presents = [o.name for o in session.get_outputs()][1:]
        self.streams = len(inputs["position_ids"].shape)

    def next_tokens(self) -> np.ndarray:
        n = self.ids.shape[1]
        result = self.session.run(None, {
            "input_ids": self.ids, "attention_mask": self.mask,
            "position_ids": text_streams(positions_of(self.mask)[:, -n:], self.streams),
            **self.past, **self.memory})
        if "memory" in self.memory:  # cached by the first call: no new rows after
            self.memory["memory"] = self.memory["memory"][:, :0]
        self.past = {p.replace("present.", "past_key_values."): v
                     for p, v in zip(self.presents, result[1:], strict=True)}
        return result[0][:, -1, :].argmax(-1).astype(np.int64)

    def append(self, tokens: np.ndarray) -> None:
        self.ids = tokens[:, None]
        self.mask = np.concatenate([self.mask, np.ones((len(tokens), 1), np.int64)], axis=1)


class _InPlace:
    """Right-padded prompts (row b's real tokens first); one buffer per cache, bound as both
    past and present, written by the model at each row's length."""

    def __init__(self, session, prompts: Sequence[Sequence[int]], max_new: int, pad: int):
        import onnxruntime as ort

        self.session = session
        self.ids, self.mask = padded(prompts, pad, side="right")
        self.lengths = self.mask.sum(-1)
        B, n = self.ids.shape
        self.positions = np.broadcast_to(np.arange(n, dtype=np.int64), (B, n)).copy()
        self.streams = len({i.name: i for i in session.get_inputs()}["position_ids"].shape)
        self.full_mask = np.concatenate([self.mask, np.ones((B, max_new), np.int64)], axis=1)
        self.step_logits = None
        self.logits_type = _ort_float(session.get_outputs()[0].type)
        self.last = self.lengths - 1  # where each row's next-token logits are
        self.io = session.io_binding()
        self.io.bind_output("logits")  # first: get_outputs() lists outputs as bound
        for i in session.get_inputs():
            if i.name.startswith("past_key_values."):
                buffer = ort.OrtValue.ortvalue_from_numpy(np.zeros(
                    (B, i.shape[1], n + max_new, i.shape[3]), dtype=_ort_float(i.type)))
                self.io.bind_ortvalue_input(i.name, buffer)
                self.io.bind_ortvalue_output(i.name.replace("past_key_values.", "present."),
                                             buffer)

    def next_tokens(self) -> np.ndarray:
        self.io.bind_cpu_input("input_ids", self.ids)
        self.io.bind_cpu_input("attention_mask", np.ascontiguousarray(self.mask))
        self.io.bind_cpu_input("position_ids", text_streams(self.positions, self.streams))
        if self.step_logits is None:  # the prompt's: all of its positions
            self.io.bind_output("logits")
        self.session.run_with_iobinding(self.io)
        if self.step_logits is None:
            logits = self.io.get_outputs()[0].numpy()
        else:
            logits = self.step_logits.numpy()
        rows = np.arange(len(self.last))
        return logits[rows, self.last, :].argmax(-1).astype(np.int64)

    def append(self, tokens: np.ndarray) -> None:
        import onnxruntime as ort

        if self.step_logits is None:  # one token per row from now on: one output buffer
            vocab = self.io.get_outputs()[0].shape()[-1]
            self.step_logits = ort.OrtValue.ortvalue_from_shape_and_type(
                [len(tokens), 1, vocab], self.logits_type)
            self.io.bind_ortvalue_output("logits", self.step_logits)
        self.ids = np.ascontiguousarray(tokens[:, None])
        self.positions = self.lengths[:, None].copy()
        self.lengths = self.lengths + 1
        self.last = np.zeros_like(self.lengths)
        self.mask = self.full_mask[:, : self.mask.shape[1] + 1]


def _ort_float(type_name: str):
    """The NumPy type of a cache or logits tensor of ONNX Runtime's `type_name`."""
    return numpy_dtype(from_ort(type_name) or "float32")


def cache_layout(graph) -> str:
    """A planned decoding graph's cache layout: in_place when its attentions write the cache
    themselves, bounded when some present is a cache's tail, else growing."""
    from .ir import Op

    if any(n.op is Op.ATTENTION and n.attr("strategy") == "gqa_cache" for n in graph.nodes):
        return "in_place"
    return "bounded" if any(n.op is Op.TAIL for n in graph.nodes) else "growing"


def generate_layer(layer, prompt_ids, max_new: int = 32, *, eos: Sequence[int] = (),
                   weights=None, seed: int = 0, target: str | None = None,
                   dtype: str = "float32", provider: str = "cpu") -> Generation:
    """`Layer.generate`: greedy new tokens of a language model (api.Layer) for prompts of
    token ids (one list, or a list of them: a batch), by its decoding model
    (`Layer.decoder_model`, built in memory from `weights` or `seed` for `target`, default
    ort-cpu) in ONNX Runtime as `attndsl generate`; a sequence stops after a token of `eos`
    (none by default: `max_new` tokens)."""
    from .backends import runtime
    from .targets import DEFAULT_TARGET

    if not is_lm(layer.spec):
        raise UsageError(f"`{layer.name}` is not a language model (a transformer with `vocab "
                         "= N`): generate takes token ids and gives tokens")
    if len(prompt_ids) and np.ndim(prompt_ids[0]) == 0:  # one prompt, not a batch of them
        prompt_ids = [prompt_ids]
    padded(prompt_ids)  # UsageError for no prompt or an empty one: before the build
    check_token_ids(prompt_ids, layer.spec.vocab, "the prompts")
    runtime.require(provider)
    model = layer.decoder_model(target=target or DEFAULT_TARGET, seed=seed, weights=weights,
                                dtype=dtype)
    return generate(runtime.make_session(model, provider), prompt_ids, max_new, eos=eos)
