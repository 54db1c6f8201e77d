"""`attndsl bench`: latency (median of repeats after a warm-up), peak memory and achieved
FLOP/s of a layer, for torch eager, torch SDPA with the equivalent dense mask, and each ONNX
Runtime target, side by side in one process, in one dtype. With `--providers cuda` the torch
baselines run on the same GPU, and ONNX Runtime's inputs and output live there (I/O binding):
no host copies are timed.

Peak memory on the CPU is the growth of the process's resident set during one run, measured
with Linux's resettable high-water mark (/proc/self/clear_refs), with ONNX Runtime's arena off
for that run so freed buffers are really returned. On CUDA it is torch's peak allocation, and
for ONNX Runtime the growth of a fresh session's arena (extended by exactly what is requested)
during its first run. FLOPs count the attention core only, on the pairs the mask makes
visible: 4 * B * H * pairs * head_dim (QK^T and PV), so a causal mask halves them.

With CUDA, ONNX Runtime is asked to print which attention kernel each fused node ran
(ORT_ENABLE_ATTENTION_KERNEL_DEBUG_INFO=1); the bench captures that and reports it in the
note column."""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import masks
from .backends import formulas, runtime
from .backends.torch import GraphModule, TorchArrays
from .dtypes import torch_dtype
from .errors import ExportError, UsageError
from .limits import beyond_limits, length_limits
from .mechanisms import KERNELS, kernel_of
from .planner import cores, fuse_cores
from .planner.torch_paths import SDPA_TAKES
from .spec import (
    Attention,
    ScoreBias,
    Transformer,
)
from .verify import make_inputs, memory_length

__all__ = ["Measurement", "attention_kernels", "bench_layer"]


@dataclass(frozen=True)
class Measurement:
    layer: str
    length: int
    batch: int
    backend: str
    latency_ms: float | None
    peak_mb: float | None
    gflops: float | None
    note: str = ""
    dtype: str = "float32"


def _proc_kb(path: str, field: str) -> int:
    """A `Field:  N kB` line of a /proc file."""
    for line in Path(path).read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def _return_freed_memory() -> None:
    """Make glibc give large freed buffers back to the OS (a fixed mmap threshold), so the
    resident set follows live memory and its high-water mark measures one run's peak."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 64 * 1024)
    libc.mallopt(m_trim_threshold, 128 * 1024)


def _peak_mb(run: Callable[[], object]) -> float | None:
    """RSS growth during one call, in MB (None where the kernel cannot reset the peak)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    before = _proc_kb("/proc/self/status", "VmRSS")
    run()
    return max(0, _proc_kb("/proc/self/status", "VmHWM") - before) / 1024


def _cuda_peak_mb(run: Callable[[], object], *, torch_run: bool) -> float:
    """Device memory peak of one call, in MB: torch's own peak for a torch run; for ONNX
    Runtime (a fresh session with an exact-growth arena) how much its first run took."""
    torch.cuda.synchronize()
    if torch_run:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        run()
        torch.cuda.synchronize()
        return max(0, torch.cuda.max_memory_allocated() - before) / 2**20
    free_before = torch.cuda.mem_get_info()[0]
    run()
    torch.cuda.synchronize()
    return max(0, free_before - torch.cuda.mem_get_info()[0]) / 2**20


def _memory_gb(device: str = "cpu") -> float:
    if device == "cuda":
        return torch.cuda.mem_get_info()[1] / 1024**3
    return _proc_kb("/proc/meminfo", "MemTotal") / 1024**2


_KERNEL_LINE = re.compile(r"Operator=(\S+)(?: Node=\S+)?(?: DataType=(\S+))?(.*)")


def attention_kernels(log: str) -> str:
    """What ORT_ENABLE_ATTENTION_KERNEL_DEBUG_INFO printed, as `Operator dtype kernel` per
    distinct fused node kind, e.g. 'GroupQueryAttention fp16 FLASH_ATTENTION'."""
    seen: list[str] = []
    for raw in log.splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", raw).strip()
        match = _KERNEL_LINE.search(line)
        if not match:
            continue
        op, dtype, rest = match.groups()
        kernel = re.search(r"SdpaKernel=(\S+)", rest)
        flags = [k for k, v in re.findall(r"([A-Z_]+)=(\d+)", rest) if v == "1"]
        name = kernel.group(1) if kernel else "+".join(flags) or "?"
        text = " ".join(filter(None, (op, dtype, name)))
        if text not in seen:
            seen.append(text)
    return "; ".join(seen)


@contextlib.contextmanager
def _stdout_of_native_code():
    """Collect what native code writes to file descriptor 1 (ORT prints kernel choices with
    std::cout) while the block runs; yields a list that then holds the text."""
    sys_out = os.dup(1)
    captured: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as stdout_file:
        os.dup2(stdout_file.fileno(), 1)
        try:
            yield captured
        finally:
            with contextlib.suppress(Exception):
                import ctypes

                ctypes.CDLL(None).fflush(None)
            os.dup2(sys_out, 1)
            os.close(sys_out)
            stdout_file.seek(0)
            captured.append(stdout_file.read().decode("utf-8", "replace"))


def _visible_pairs(attn: Attention, inputs: dict[str, np.ndarray]) -> int:
    """Exact count of visible (b, q, k) pairs, evaluated in row chunks to bound memory."""
    B, L = inputs["input_ids" if "input_ids" in inputs else "x"].shape[:2]  # an LM: token ids
    S = inputs["memory"].shape[1] if "memory" in inputs else L
    kernel = kernel_of(attn.kernel)
    pairs = kernel.pairs(attn.kernel, B, L, S) if kernel else None
    if pairs is not None:
        return pairs
    total = 0
    k = np.arange(S)[None, :]
    segments = inputs.get("segment_ids")
    docs = None
    if segments is not None and masks.reads_documents(attn.mask):
        docs = formulas.document_positions(TorchArrays(torch.device("cpu")),
                                           torch.from_numpy(segments)).numpy()
    for start in range(0, L, 1024):
        q = np.arange(start, min(L, start + 1024))[:, None]
        vis = masks.evaluate(attn.mask, q, k, masks.MaskContext(
            L, S, key_lengths=inputs.get("key_lengths"), segment_ids=segments,
            document_positions=docs, memory_segment_ids=inputs.get("memory_segment_ids")))
        total += int(np.broadcast_to(vis, (B, *np.broadcast_shapes(q.shape, k.shape))
                                     if vis.ndim == 2 else vis.shape).sum())
    return total


def _sdpa_needs_no_mask(s: Attention) -> bool:
    """A plain causal or unmasked layer without biases: SDPA's flash kernel, no L x S mask."""
    return s.mask in (masks.Causal(), masks.Full()) and not isinstance(s.position,
                                                                     ScoreBias)


def _with_sdpa(module: GraphModule) -> GraphModule | None:
    """The same layer with each softmax core run by F.scaled_dot_product_attention (a dense
    boolean mask, none for plain causal or unmasked attention): what a user would write in
    PyTorch. None where SDPA cannot express the layer: a kernel module's core, or a score
    modifier or `softmax` hook mechanism SDPA does not take (`torch_paths.SDPA_TAKES`)."""
    if any(c.kernel or c.untaken(SDPA_TAKES) for c in cores(module.graph)):
        return None
    param = next(module.parameters())
    sdpa = GraphModule(fuse_cores(module.graph, "sdpa")).to(param.device, param.dtype)
    sdpa.load_state_dict(module.state_dict())
    return sdpa.eval()


def bench_layer(layer, *, lengths: tuple[int, ...], batch: int, targets: tuple[str, ...],
                providers: tuple[str, ...], repeat: int, seed: int = 0, dtype: str = "float32",
                progress: Callable[[str], None] | None = None) -> list[Measurement]:
    """Measure every backend at every length. Timed runs are interleaved round-robin across
    backends, so a slow spell on a shared machine hits all of them alike."""
    from .targets import check_dtype_target, get

    spec = layer.spec
    attn = spec.attention if isinstance(spec, Transformer) else spec
    for L in lengths:  # before anything slow
        why = beyond_limits(length_limits(spec), L,
                            memory_length(L) if attn.kind == "cross" else None)
        if why:
            raise UsageError(f"`{spec.name}` cannot be measured at L = {L}: {why}")
    for provider in providers:
        runtime.require(provider)
    for target in targets:
        check_dtype_target(dtype, target, providers)
    device = "cuda" if "cuda" in providers else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ExportError("--providers cuda: this torch has no CUDA, and the torch baselines "
                          "must run on the same GPU (install a CUDA build of torch)")
    if device == "cuda":  # ORT prints the attention kernel of each fused node it creates
        os.environ["ORT_ENABLE_ATTENTION_KERNEL_DEBUG_INFO"] = "1"
    _return_freed_memory()
    module = layer.to_torch(seed=seed, dtype=dtype, path="dense").to(device)  # the exact form
    sdpa = _with_sdpa(layer.to_torch(seed=seed, dtype=dtype, path="dense").to(device))
    sdpa_is_flash = _sdpa_needs_no_mask(attn)
    models = {t: layer.onnx_model(target=t, seed=seed, dtype=dtype) for t in targets}

    def synced(run: Callable[[], object]) -> Callable[[], object]:
        if device == "cpu":
            return run

        def call() -> object:
            out = run()
            torch.cuda.synchronize()
            return out
        return call

    def peak(run: Callable[[], object], *, torch_run: bool) -> float | None:
        if device == "cuda":
            return _cuda_peak_mb(run, torch_run=torch_run)
        return _peak_mb(run)

    layers = spec.layers if isinstance(spec, Transformer) else 1
    # kernel modules without `scores` never form L x S scores in any backend (unless the
    # torch module's form weighs every pair: `eager_pairs`)
    hashed = all(c.kernel in KERNELS and not KERNELS[c.kernel].scores
                 and not KERNELS[c.kernel].eager_pairs for c in cores(module.graph))
    out: list[Measurement] = []
    for L in lengths:
        inputs = make_inputs(spec, batch, L, np.random.default_rng(seed))
        if "key_lengths" in inputs:
            inputs["key_lengths"][:] = inputs["memory"].shape[1] if "memory" in inputs else L
        S = inputs["memory"].shape[1] if "memory" in inputs else L
        flops = 4 * attn.heads * _visible_pairs(attn, inputs) * attn.head_dim * layers
        dense_gb = 3 * 4 * batch * attn.heads * L * S / 1e9  # scores, mask, probabilities
        too_big = dense_gb > 0.4 * _memory_gb(device) and not hashed
        tensors = {k: torch.from_numpy(v).to(device, torch_dtype(dtype)) if v.dtype.kind == "f"
                   else torch.from_numpy(v).to(device) for k, v in inputs.items()}
        # (name, timed run, run for the memory measurement, materialises L x S)
        runs: list[tuple[str, Callable[[], object], Callable[[], object], bool]] = [
            ("torch eager", synced(lambda t=tensors: module(**t)),
             synced(lambda t=tensors: module(**t)), True)]
        if sdpa is not None:
            runs.append(("torch sdpa (dense mask)", synced(lambda t=tensors: sdpa(**t)),
                         synced(lambda t=tensors: sdpa(**t)), not sdpa_is_flash))
        notes: dict[str, str] = {}
        for target, data in models.items():
            for provider in providers:
                name = f"{target} on {provider}"
                if not get(target).planned and too_big:
                    notes[name] = f"skipped: dense L x S needs ~{dense_gb:.0f} GB"
                    runs.append((name, _never, _never, True))
                    continue
                try:
                    fast = runtime.Bound(runtime.make_session(
                        data, provider, profile=provider == "cuda"), inputs)
                    lean = runtime.Bound(runtime.make_session(data, provider, arena=False),
                                         inputs)
                except ExportError as exc:
                    notes[name] = f"failed: {str(exc).splitlines()[0][:80]}"
                    runs.append((name, _never, _never, False))
                    continue
                runs.append((name, fast, lean, not get(target).planned))
        times: dict[str, list[float]] = {}
        live = []
        for name, run, _, dense in runs:
            if name in notes:
                continue
            if dense and too_big:
                notes[name] = f"skipped: dense L x S needs ~{dense_gb:.0f} GB"
                continue
            try:
                if progress:
                    progress(f"{layer.name} L={L}: warming up {name}")
                with torch.inference_mode(), _stdout_of_native_code() as log:
                    run()
                if isinstance(run, runtime.Bound):
                    runtime.require_on_device(run.session)
                kernels = attention_kernels(log[0] if log else "")
                if kernels:
                    notes[name] = f"kernel: {kernels}"
                live.append((name, run))
                times[name] = []
            except Exception as exc:  # a backend that cannot run this size is reported
                notes[name] = f"failed: {str(exc).splitlines()[0][:80]}"
        # with CUDA, ORT prints its kernel choice at every run: keep that out of the table
        quiet = _stdout_of_native_code() if device == "cuda" else contextlib.nullcontext()
        with quiet:
            for i in range(repeat):
                for name, run in live:
                    if progress:
                        progress(f"bench {layer.name} L={L}: {name}", i, repeat)
                    start = time.perf_counter()
                    with torch.inference_mode():
                        run()
                    times[name].append((time.perf_counter() - start) * 1e3)
        for name, _, lean, _ in runs:
            if name not in times:
                out.append(Measurement(layer.name, L, batch, name, None, None, None,
                                       notes[name], dtype))
                continue
            with torch.inference_mode():
                mb = peak(lean, torch_run=not isinstance(lean, runtime.Bound))
            ms = statistics.median(times[name])
            out.append(Measurement(layer.name, L, batch, name, ms, mb, flops / ms / 1e6,
                                   notes.get(name, ""), dtype))
        del runs, live
    return out


def _never() -> None:
    raise AssertionError("a skipped backend was run")
