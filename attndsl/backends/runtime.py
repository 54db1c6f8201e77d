"""ONNX Runtime sessions for verify, bench and run. A CUDA result is only ever reported from a
session whose first provider really is CUDA: ORT falls back to the CPU silently otherwise."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

import numpy as np

from ..errors import ExportError, UsageError

__all__ = ["PROVIDERS", "available", "make_session", "require", "run"]

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def available() -> list[str]:
    import onnxruntime as ort

    return ort.get_available_providers()


def require(provider: str) -> str:
    """The ORT provider name for `provider`, or ExportError (exit 3) if it cannot run here."""
    if provider not in PROVIDERS:
        raise UsageError(f"unknown provider `{provider}`: choose from {', '.join(PROVIDERS)}")
    if provider == "cuda":
        with contextlib.suppress(ImportError):
            import torch  # noqa: F401  (loads the CUDA libraries that onnxruntime-gpu needs)
    import onnxruntime as ort

    wanted = PROVIDERS[provider]
    if wanted not in ort.get_available_providers():
        raise ExportError(
            f"provider `{provider}` is not available in this onnxruntime "
            f"({', '.join(ort.get_available_providers())}); for CUDA install onnxruntime-gpu "
            "(never together with onnxruntime) on a machine with an NVIDIA GPU")
    return wanted


def make_session(model: bytes | str | os.PathLike[str], provider: str = "cpu",
                 threads: int | None = None, arena: bool = True):
    """An InferenceSession on `provider` (cpu | cuda), or ExportError (exit 3) if that provider
    cannot run here."""
    wanted = require(provider)
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = arena
    if threads:
        options.intra_op_num_threads = threads
    source = model if isinstance(model, bytes) else os.fspath(model)
    providers = [wanted] + (["CPUExecutionProvider"] if provider != "cpu" else [])
    try:
        session = ort.InferenceSession(source, options, providers=providers)
    except Exception as exc:
        raise ExportError(f"ONNX Runtime could not load the model: {exc}") from None
    if session.get_providers()[0] != wanted:
        raise ExportError(f"ONNX Runtime fell back to {session.get_providers()[0]} instead of "
                          f"{wanted}; refusing to report its results as `{provider}`")
    return session


def run(session, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    names = {i.name for i in session.get_inputs()}
    feed = {k: v for k, v in inputs.items() if k in names}
    try:
        return session.run(None, feed)[0]
    except Exception as exc:
        raise ExportError(f"ONNX Runtime failed: {str(exc).splitlines()[0]}") from None
