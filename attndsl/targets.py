"""Targets, and what the planner asks about ONNX Runtime, in one place: what each target
means, which op has a kernel for which dtype on which provider, which ops lack a bfloat16
CUDA kernel, and which ONNX Runtime release the plans were verified against. Every other
module asks here; none compares target names or restates a kernel fact.

The kernel facts are ONNX Runtime's own kernel tables and run-time rules (attndsl/placement,
docs/PLACEMENT.md); the rest come from its kernel sources and from measurements on this
project's machines (BENCHMARKS.md)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ExportError, UsageError
from .placement import op_runs
from .placement.rules import GQA_HEAD_SIZE_MULTIPLE

__all__ = [
    "CPU_TARGET", "CUDA_TARGET", "DEFAULT_TARGET", "GQA_HEAD_DIM_MULTIPLE", "HEAVY_OPS",
    "PORTABLE_TARGET", "TARGETS", "TORCH_PLAN", "TRITON_TARGET", "VERIFIED_ORT", "Target",
    "check_dtype_target", "check_ort_version", "get", "has_kernel", "kernel_dtypes",
    "kernel_skips_outside_window", "lacks_bfloat16_cuda_kernel", "names",
    "verify_pairs",
]


@dataclass(frozen=True)
class Target:
    name: str
    planned: bool  # the planner chooses fused kernels and sparse execution (else: dense export)
    provider: str | None  # the ORT provider its plan is tuned for; None: any runtime
    verified_on: tuple[str, ...]  # providers `verify` runs it on by default
    summary: str


# The targets' names: other modules import these rather than spell them (a test holds it)
PORTABLE_TARGET = "portable"
CPU_TARGET = "ort-cpu"
CUDA_TARGET = "ort-cuda"
# not a target: `explain --target torch` shows how the torch module (to_torch) runs each
# attention, beside the ONNX targets' plans
TORCH_PLAN = "torch"

_ALL = (
    Target(PORTABLE_TARGET, planned=False, provider=None, verified_on=("cpu", "cuda"),
           summary="standard ONNX ops only, masks in the dense L x S form; runs on any ONNX "
                   "runtime; made by torch.onnx.export"),
    Target(CPU_TARGET, planned=True, provider="cpu", verified_on=("cpu",),
           summary="ONNX Runtime's fused kernels where they are faster on the CPU, "
                   "block-sparse execution elsewhere; lowered by attndsl"),
    Target(CUDA_TARGET, planned=True, provider="cuda", verified_on=("cpu", "cuda"),
           summary="the same for the CUDA provider: only ops with CUDA kernels for the dtype; "
                   "lowered by attndsl"),
)
TARGETS: dict[str, Target] = {t.name: t for t in _ALL}
DEFAULT_TARGET = CPU_TARGET
TRITON_TARGET = CUDA_TARGET  # Triton serves models on GPUs


def get(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise UsageError(f"unknown target `{name}`: choose from {', '.join(TARGETS)}") from None


def names(*, provider: str | None = None, sep: str = ", ") -> str:
    """The targets' names joined by `sep` (for help text), those `verify` runs on `provider`
    by default where it is given."""
    return sep.join(t.name for t in _ALL if provider is None or provider in t.verified_on)


def verify_pairs(targets: tuple[str, ...] | None,
                 providers: tuple[str, ...]) -> list[tuple[str, str]]:
    """The (target, provider) runs of a verify: given targets on every provider; by default
    each target on the providers it is verified on (ort-cpu's float32 GroupQueryAttention has
    no CUDA kernel, so it is not run on CUDA)."""
    names = tuple(TARGETS) if targets is None else targets
    return [(t, p) for t in names for p in providers
            if targets is not None or p in get(t).verified_on]


# -- ONNX Runtime releases ------------------------------------------------------------------

# The releases whose contrib kernels the planned targets were verified against, "major.minor".
# GroupQueryAttention's local_window_size counts exactly w keys in 1.31; other releases' CPU
# kernels count w + 1, which would silently widen every window by one key.
VERIFIED_ORT = ("1.31",)


def check_ort_version(target: str, version: str | None = None) -> None:
    """ExportError unless this onnxruntime runs `target`'s models as planned: planned targets
    use contrib kernels whose meaning changes between releases; portable uses standard ops."""
    if not get(target).planned:
        return
    if version is None:
        import onnxruntime as ort

        version = ort.__version__
    if ".".join(version.split(".")[:2]) not in VERIFIED_ORT:
        raise ExportError(
            f"the {target} target's models are verified for onnxruntime "
            f"{' or '.join(VERIFIED_ORT)}, and this is onnxruntime {version}: its contrib "
            "kernels (GroupQueryAttention's window) may mean something else\n"
            f"  = help: install onnxruntime {VERIFIED_ORT[-1]}.x (pip install "
            f"\"onnxruntime=={VERIFIED_ORT[-1]}.*\", or onnxruntime-gpu), or compile with "
            "--target portable (standard ops only)")


# -- kernels --------------------------------------------------------------------------------

# Which op has a kernel for which dtype on which provider is ONNX Runtime's own kernel tables
# (attndsl/placement): the planner asks `has_kernel` and never emits a node its provider lacks.
GQA_HEAD_DIM_MULTIPLE = GQA_HEAD_SIZE_MULTIPLE  # GroupQueryAttention refuses other head sizes
_DTYPES = ("float32", "float16", "bfloat16")
# providers whose windowed GroupQueryAttention skips keys outside local_window_size (the CPU
# kernel visits every earlier key: ~4x slower than block-sparse at L = 8192, BENCHMARKS.md)
_WINDOW_SKIPPING = frozenset({"cuda"})


def kernel_dtypes(op: str, provider: str) -> tuple[str, ...] | None:
    """The dtypes `op`'s kernel on `provider` takes, or None for every dtype."""
    taking = tuple(d for d in _DTYPES if op_runs(op, d, provider))
    return None if taking == _DTYPES else taking


def has_kernel(op: str, dtype: str, provider: str | None) -> bool:
    """Whether `op` (as attndsl emits it) has a kernel for `dtype` on `provider` (None: on
    both providers)."""
    providers = ("cpu", "cuda") if provider is None else (provider,)
    return all(op_runs(op, dtype, p) for p in providers)


def kernel_skips_outside_window(provider: str | None) -> bool:
    return provider in _WINDOW_SKIPPING


def lacks_bfloat16_cuda_kernel(op: str, dtype: str) -> bool:
    """True where a `dtype` model must not use `op` on its own values: bfloat16 models run on
    CUDA alone, and the CUDA provider has no bfloat16 kernel for `op`."""
    return dtype == "bfloat16" and not op_runs(op, dtype, "cuda")


def check_dtype_target(dtype: str, target: str, providers: tuple[str, ...] = ()) -> None:
    """bfloat16 runs only on CUDA: ONNX Runtime's CPU provider has no bfloat16 kernels for
    MatMul, Add, Softmax and most other ops. Refuse up front rather than fail in ORT."""
    if dtype != "bfloat16":
        return
    if get(target).provider == "cpu":
        raise UsageError(f"the {target} target cannot run bfloat16: ONNX Runtime's CPU provider "
                         "has no bfloat16 kernels for MatMul, Add, Softmax and most other ops\n"
                         "  = help: use --target ort-cuda (or portable), or --dtype float16")
    if "cpu" in providers:
        raise UsageError("bfloat16 models cannot run on ONNX Runtime's CPU provider (it has no "
                         "bfloat16 kernels for MatMul, Add, Softmax and most other ops)\n"
                         "  = help: verify bfloat16 with --providers cuda on a machine with an "
                         "NVIDIA GPU, or use --dtype float16 here")


# the nodes that do a model's work: one of these on the CPU makes a "CUDA" result a CPU one
HEAVY_OPS = frozenset({
    "MatMul", "FusedMatMul", "Gemm", "GroupQueryAttention", "MultiHeadAttention", "Attention",
    "Softmax", "LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization", "RMSNormalization", "Gelu", "FastGelu", "BiasGelu",
    "LinearAttention"})
