"""`attndsl run`: run an exported model in ONNX Runtime with given or random inputs, whose
names, dtypes and shapes are read from the model itself. Float inputs are converted to the
model's float type (float16 and bfloat16 included); the output is reported, and saved, as
float32 (NumPy files cannot hold bfloat16)."""

from __future__ import annotations

import argparse
import io
import time
from pathlib import Path

import numpy as np

from .backends import runtime
from .errors import UsageError
from .output import write_atomic

__all__ = ["random_inputs", "run_model"]


def random_inputs(session, batch: int, length: int, memory_length: int,
                  seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for every graph input: floats ~ N(0, 1) (float32, or float64 for a double input;
    converted to the model's type when bound); key_lengths = the memory length (no padding);
    segment_ids = one document."""
    rng = np.random.default_rng(seed)
    feed: dict[str, np.ndarray] = {}
    for inp in session.get_inputs():
        dims = []
        for i, dim in enumerate(inp.shape):
            if isinstance(dim, int):
                dims.append(dim)
            elif i == 0:
                dims.append(batch)
            else:
                dims.append(memory_length if inp.name == "memory" else length)
        if inp.type == "tensor(int64)":
            if inp.name == "key_lengths":
                feed[inp.name] = np.full(dims, memory_length if _has(session, "memory")
                                         else length, dtype=np.int64)
            else:
                feed[inp.name] = np.zeros(dims, dtype=np.int64)
        else:
            dtype = np.float64 if inp.type == "tensor(double)" else np.float32
            feed[inp.name] = rng.standard_normal(dims).astype(dtype)
    return feed


def _has(session, name: str) -> bool:
    return any(i.name == name for i in session.get_inputs())


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
    return {n: feed[n] for n in wanted}


def run_model(args: argparse.Namespace) -> int:
    path = Path(args.model)
    if not path.is_file():
        raise UsageError(f"{path}: no such model file")
    session = runtime.make_session(path, args.provider, profile=args.provider == "cuda")
    if args.inputs:
        feed = _load_npz(args.inputs, session)
    else:
        memory = args.memory_length or args.length
        feed = random_inputs(session, args.batch, args.length, memory, args.seed)
    bound = runtime.Bound(session, feed)  # not timed: imports torch, places the inputs
    start = time.perf_counter()
    bound()
    elapsed = (time.perf_counter() - start) * 1e3
    runtime.require_on_device(session)
    value = bound.output()
    print(f"model    {path} on {session.get_providers()[0]}")
    for meta in session.get_inputs():
        kind = meta.type.removeprefix("tensor(").rstrip(")")
        print(f"input    {meta.name:<12} {kind:<8} {list(feed[meta.name].shape)}")
    meta = session.get_outputs()[0]
    kind = meta.type.removeprefix("tensor(").rstrip(")")
    finite = np.isfinite(value).all()
    print(f"output   {meta.name:<12} {kind:<8} {list(value.shape)}  "
          f"mean {value.mean():+.4f}  std {value.std():.4f}  "
          f"min {value.min():+.4f}  max {value.max():+.4f}"
          + ("" if finite else "  NON-FINITE VALUES"))
    print(f"latency  {elapsed:.2f} ms (first run, includes warm-up)")
    if args.output:
        buffer = io.BytesIO()
        np.savez(buffer, **{meta.name: value})
        write_atomic(Path(args.output), buffer.getvalue())
        print(f"wrote {args.output} ({meta.name} as float32)")
    return 0
