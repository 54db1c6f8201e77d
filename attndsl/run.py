"""`attndsl run`: run an exported model in ONNX Runtime with given or random inputs, whose
names, dtypes and shapes are read from the model itself. Float inputs are converted to the
model's float type (float16 and bfloat16 included); the output is reported, and saved, as
float32 (NumPy files cannot hold bfloat16)."""

from __future__ import annotations

import argparse
import io
import math
import time
from pathlib import Path

import numpy as np

from .backends import runtime
from .errors import UsageError
from .limits import beyond_limits
from .output import write_atomic
from .patches import image_shape
from .usage import check_token_ids

__all__ = ["model_limits", "random_inputs", "run_model", "vocab_of"]

_MAX_INPUT_ELEMENTS = 1 << 28  # 1 GB of float32 per input


def random_inputs(session, batch: int, length: int, memory_length: int,
                  seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for every graph input: floats ~ N(0, 1) (float32, or float64 for a double input;
    converted to the model's type when bound); a language model's input_ids uniform over its
    vocabulary; key_lengths and a decoder's memory_lengths: every key real (no padding);
    segment_ids (and a cross attention's memory_segment_ids) = one document. A decoding
    model gets a prompt of `length` tokens: an empty cache (or in-place buffers of that
    length), an all-ones attention_mask, positions 0 .. length-1 (in each of multimodal RoPE's
    three streams, as text tokens have them, where position_ids is [3, batch, length])."""
    rng = np.random.default_rng(seed)
    feed: dict[str, np.ndarray] = {}
    in_place = session.get_modelmeta().custom_metadata_map.get("attndsl.kv_cache") == \
        "in_place"
    for inp in session.get_inputs():
        dims = []
        for i, dim in enumerate(inp.shape):
            if isinstance(dim, int):
                dims.append(dim)
            elif i == 0:
                dims.append(batch)
            elif inp.name.startswith("past_key_values."):  # a prompt: an empty cache (in
                dims.append(length if in_place else 0)  # place: a buffer of its length)
            else:
                dims.append(memory_length if dim == "memory_length" else length)
        if inp.name == "attention_mask":  # a decoding model's prompt: every token real
            feed[inp.name] = np.ones(dims, dtype=np.int64)
            continue
        if inp.name == "position_ids":  # (multimodal RoPE's [3, batch, length]: text tokens')
            shape = (dims[0], batch, length) if len(dims) == 3 else (batch, length)
            feed[inp.name] = np.broadcast_to(np.arange(length, dtype=np.int64), shape).copy()
            continue
        if inp.name.startswith("past_key_values."):
            feed[inp.name] = np.zeros(dims, dtype=np.float32)
            continue
        if inp.name == "pixel_values":  # a vision stack's: an image of `length` patches
            spec = spec_of(session)
            if getattr(spec, "patches", None) is None:
                raise UsageError("cannot draw an image: the model holds no attndsl vision "
                                 "spec; pass the inputs with --inputs")
            p = spec.patches
            dims = [batch, p.channels, *image_shape(p, length)]
        if math.prod(dims) > _MAX_INPUT_ELEMENTS:
            raise UsageError(f"input `{inp.name}` would be {list(dims)}, "
                             f"{math.prod(dims) * 4 / 1e9:.1f} GB of random values; reduce "
                             "--batch or --length")
        if inp.type == "tensor(int64)":
            if inp.name in ("key_lengths", "memory_lengths"):  # (a lone cross attention's
                rows = inp.name == "memory_lengths" or _lone_cross(session)  # key_lengths:
                # its memory rows')
                feed[inp.name] = np.full(dims, memory_length if rows else length,
                                         dtype=np.int64)
            elif inp.name == "input_ids":  # token ids drawn uniformly from the vocabulary
                feed[inp.name] = rng.integers(0, _vocab(session), dims, dtype=np.int64)
            else:
                feed[inp.name] = np.zeros(dims, dtype=np.int64)
        else:
            dtype = np.float64 if inp.type == "tensor(double)" else np.float32
            feed[inp.name] = rng.standard_normal(dims).astype(dtype)
    return feed


def _vocab(session) -> int:
    """A language model's vocabulary: the last axis of its logits, or, for a text encoder
    (`lm_head = false`: hidden states out), its attndsl spec's."""
    size = vocab_of(session) or getattr(spec_of(session), "vocab", None)
    if size is None:
        raise UsageError("cannot draw token ids: the model's logits give no vocabulary size; "
                         "pass the inputs with --inputs")
    return size


def vocab_of(session) -> int | None:
    """The vocabulary of a model with logits out (their last axis, less a genai folder's
    stop column: `genai.stop_column`), or None."""
    out = session.get_outputs()[0]
    size = out.shape[-1] if out.shape else None
    if out.name != "logits" or not isinstance(size, int) or size < 1:
        return None
    stop = session.get_modelmeta().custom_metadata_map.get("attndsl.stop_column")
    return int(stop) if stop is not None else size


def _has(session, name: str) -> bool:
    return any(i.name == name for i in session.get_inputs())


def _lone_cross(session) -> bool:
    """Whether the model is a cross attention alone (its key_lengths count memory rows; a
    decoder stack's count its tokens): its spec, where its metadata holds one, else its
    inputs (memory, and no memory_lengths)."""
    spec = spec_of(session)
    if spec is not None:
        return getattr(spec, "kind", None) == "cross"
    return _has(session, "memory") and not _has(session, "memory_lengths")


def spec_of(session):
    """The checked spec of the layer an attndsl model was made from (its metadata's
    `attndsl.spec` and `attndsl.layer`), or None for a model that holds none."""
    meta = session.get_modelmeta().custom_metadata_map
    if "attndsl.spec" not in meta:
        return None
    from .check import check
    from .parser import decode, parse

    text = meta["attndsl.spec"].encode("utf-8")
    layers = check(parse(decode(text, meta.get("attndsl.spec_file", "<model>")))).layers
    return layers.get(meta.get("attndsl.layer"))


def _load_npz(path: str, session) -> dict[str, np.ndarray]:
    try:
        with np.load(path) as data:
            feed = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise UsageError(f"{path}: no such inputs file") from None
    except Exception as exc:
        raise UsageError(f"{path}: not a readable .npz file ({exc})") from None
    wanted = [i.name for i in session.get_inputs()]
    missing = [n for n in wanted if n not in feed]
    if missing:
        raise UsageError(f"{path}: missing input(s) {', '.join(missing)}; the model takes "
                         f"{', '.join(wanted)}")
    feed = {n: feed[n] for n in wanted}
    _check_feed(session, feed, path)
    vocab = vocab_of(session)
    if "input_ids" in feed and vocab is not None:  # ONNX's Gather wraps a negative id
        check_token_ids(feed["input_ids"], vocab, f"{path}: `input_ids`")
    return feed


def _check_feed(session, feed: dict[str, np.ndarray], path: str) -> None:
    """UsageError unless every array fits its input: integer inputs hold integers (a float
    would be truncated), ranks and fixed sizes agree, and each named axis (batch, length,
    memory_length) has one size >= 1 across all inputs."""
    sizes: dict[str, tuple[int, str]] = {}
    for meta in session.get_inputs():
        array = feed[meta.name]
        integer = meta.type in ("tensor(int64)", "tensor(int32)")
        if integer and array.dtype.kind not in "iu":
            raise UsageError(f"{path}: input `{meta.name}` must hold integers, found "
                             f"{array.dtype} (it would be truncated)")
        if not integer and array.dtype.kind not in "fiu":
            raise UsageError(f"{path}: input `{meta.name}` must hold numbers, found "
                             f"{array.dtype}")
        if array.ndim != len(meta.shape):
            raise UsageError(f"{path}: input `{meta.name}` has shape {list(array.shape)}; the "
                             f"model takes {len(meta.shape)} axes {meta.shape}")
        for axis, (dim, size) in enumerate(zip(meta.shape, array.shape, strict=True)):
            if isinstance(dim, int) and dim != size:
                raise UsageError(f"{path}: input `{meta.name}` has {size} on axis {axis}; the "
                                 f"model takes {dim}")
            if isinstance(dim, str):
                if size < 1:
                    raise UsageError(f"{path}: input `{meta.name}` has an empty {dim} axis")
                seen = sizes.setdefault(dim, (size, meta.name))
                if seen[0] != size:
                    raise UsageError(f"{path}: `{meta.name}` has {dim} {size} but "
                                     f"`{seen[1]}` has {seen[0]}; they must agree")


def model_limits(session) -> dict[str, tuple[int, str]]:
    """The length limits an attndsl model records (limits.length_limits), from its metadata."""
    meta = session.get_modelmeta().custom_metadata_map
    return {axis: (int(meta[f"attndsl.max_{axis}"]), meta.get(f"attndsl.max_{axis}.why", ""))
            for axis in ("length", "memory_length") if f"attndsl.max_{axis}" in meta}


def _check_limits(session, feed: dict[str, np.ndarray]) -> None:
    """UsageError for inputs longer than the model takes: ONNX Runtime itself would fail deep
    in the graph (a MatMul dimension mismatch, a Gather index out of range)."""
    first = "input_ids" if "input_ids" in feed else "x"
    total = session.get_modelmeta().custom_metadata_map.get("attndsl.max_total_length")
    if total and "attention_mask" in feed and feed["attention_mask"].shape[1] > int(total):
        raise UsageError(f"the model holds at most {total} tokens (the context length it was "
                         f"compiled for), not {feed['attention_mask'].shape[1]}\n  = help: run "
                         "it with --length up to that")
    if first not in feed or feed[first].ndim < 2 or "past_key_values.0.key" in feed:
        return  # a decoding model's limit is the positions it has reached, not the call's
    memory = feed["memory"].shape[1] if "memory" in feed else None
    why = beyond_limits(model_limits(session), feed[first].shape[1], memory)
    if why:
        raise UsageError(f"the model cannot take {why}\n  = help: run it with --length (or "
                         "--memory-length) up to that")


def run_model(args: argparse.Namespace) -> int:
    path = Path(args.model)
    if path.is_dir():  # a genai folder (compile --export genai): the model it names
        from .genai import load_decoder

        path = load_decoder(path)[0]
    elif not path.is_file():
        raise UsageError(f"{path}: no such model file or genai folder")
    session = runtime.make_session(path, args.provider, profile=args.provider == "cuda")
    if args.inputs:
        feed = _load_npz(args.inputs, session)
    else:
        memory = args.memory_length or args.length
        feed = random_inputs(session, args.batch, args.length, memory, args.seed)
    _check_limits(session, feed)
    bound = runtime.Bound(session, feed)  # not timed: places the inputs on the device
    rest = [o.name for o in session.get_outputs()[1:]] if args.output else []
    for name in rest:  # present.* too: ORT allocates them, on the CPU, where NumPy reads
        bound.binding.bind_output(name, "cpu")
    start = time.perf_counter()
    bound()
    elapsed = (time.perf_counter() - start) * 1e3
    runtime.require_on_device(session)
    values = [_float32(v) for v in bound.binding.get_outputs()[1:]] if rest else []
    value = bound.output()
    print(f"model    {path} on {session.get_providers()[0]}")
    wide = max(12, *(len(m.name) for m in session.get_inputs()))
    for meta in session.get_inputs():
        kind = meta.type.removeprefix("tensor(").rstrip(")")
        print(f"input    {meta.name:<{wide}} {kind:<8} {list(feed[meta.name].shape)}")
    meta = session.get_outputs()[0]
    kind = meta.type.removeprefix("tensor(").rstrip(")")
    shown = value[..., :vocab_of(session)] if vocab_of(session) else value  # no stop column
    finite = np.isfinite(shown).all()
    print(f"output   {meta.name:<{wide}} {kind:<8} {list(value.shape)}  "
          f"mean {shown.mean():+.4f}  std {shown.std():.4f}  "
          f"min {shown.min():+.4f}  max {shown.max():+.4f}"
          + ("" if finite else "  NON-FINITE VALUES"))
    print(f"latency  {elapsed:.2f} ms (first run, includes warm-up)")
    if args.output:
        buffer = io.BytesIO()
        np.savez(buffer, **{meta.name: value}, **dict(zip(rest, values, strict=True)))
        write_atomic(Path(args.output), buffer.getvalue())
        names = meta.name if not rest else f"{meta.name} and {len(rest)} more: every output"
        print(f"wrote {args.output} ({names}, as float32)")
    return 0


def _float32(value) -> np.ndarray:
    """An output OrtValue on the CPU as float32 NumPy: bfloat16, which NumPy lacks, by its
    bits (the high half of a float32's)."""
    if value.data_type() != "tensor(bfloat16)":
        return np.asarray(value.numpy(), dtype=np.float32)
    import ctypes

    count = int(np.prod(value.shape()))
    raw = (ctypes.c_uint16 * count).from_address(value.data_ptr())
    bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32).reshape(value.shape()).copy()
