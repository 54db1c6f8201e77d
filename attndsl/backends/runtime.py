"""ONNX Runtime sessions for verify, bench and run. A CUDA result is only ever reported from a
session whose first provider really is CUDA: ORT falls back to the CPU silently otherwise.

Runs go through I/O binding with torch tensors as buffers: inputs are converted to the
model's input types (float16 and bfloat16 included, which NumPy feeds cannot express) and
placed on the session's device, so CUDA timings exclude host copies.

Even in a CUDA session ONNX Runtime places a node with no CUDA kernel for its type on the CPU,
without a word. CUDA sessions are therefore profiled for their first run, and a result is
refused if any of the nodes that do the work (matmuls, attention, softmax, norms) ran on the
CPU (`checked_runner`)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping

import numpy as np

from ..dtypes import ONNX_TYPE, from_ort
from ..errors import ExportError, UsageError
from ..targets import HEAVY_OPS, check_ort_version
from .exported import Exported

__all__ = ["PROVIDERS", "Bound", "available", "checked_runner", "device_of", "make_session",
           "off_device", "onnxruntime", "placements", "require", "require_on_device", "run"]

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def onnxruntime():
    """The onnxruntime module (from the onnxruntime or onnxruntime-gpu package, whichever is
    installed), or ExportError (exit 3) saying how to install one: the runtime is an extra."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise ExportError(
            "ONNX Runtime is not installed: attndsl compiles without it, but running a model "
            "needs it\n  = help: pip install \"attndsl[cpu]\" (onnxruntime), or "
            "\"attndsl[gpu]\" (onnxruntime-gpu, on an NVIDIA machine); never both (in a "
            "source checkout, add -c constraints.txt: the tested versions)") from None
    return ort


def available() -> list[str]:
    return onnxruntime().get_available_providers()


def require(provider: str) -> str:
    """The ORT provider name for `provider`, or ExportError (exit 3) if it cannot run here."""
    if provider not in PROVIDERS:
        raise UsageError(f"unknown provider `{provider}`: choose from {', '.join(PROVIDERS)}")
    ort = onnxruntime()

    if provider == "cuda":
        with contextlib.suppress(ImportError):
            import torch  # noqa: F401  (loads the CUDA libraries that onnxruntime-gpu needs)
        if hasattr(ort, "preload_dlls") and "CUDAExecutionProvider" in \
                ort.get_available_providers():
            with contextlib.suppress(Exception):  # torch's copies are already loaded, or none
                ort.preload_dlls()

    wanted = PROVIDERS[provider]
    if wanted not in ort.get_available_providers():
        raise ExportError(
            f"provider `{provider}` is not available in this onnxruntime "
            f"({', '.join(ort.get_available_providers())}); for CUDA install onnxruntime-gpu "
            "(never together with onnxruntime) on a machine with an NVIDIA GPU")
    return wanted


def make_session(model: Exported | bytes | str | os.PathLike[str], provider: str = "cpu",
                 threads: int | None = None, arena: bool = True, profile: bool = False):
    """An InferenceSession on `provider` (cpu | cuda), or ExportError (exit 3) if that provider
    cannot run here; a path's external data is read from beside it, and an `Exported` with
    external data is loaded from a temporary folder. arena=False returns freed CPU memory at
    once and grows the CUDA arena by exactly what is requested, so memory measurements see one
    run's real peak."""
    if isinstance(model, Exported) and model.external:
        with tempfile.TemporaryDirectory(prefix="attndsl-model-") as folder:
            return make_session(model.write(folder), provider, threads, arena, profile)
    if isinstance(model, Exported):
        model = model.bytes()
    wanted = require(provider)
    ort = onnxruntime()

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = arena
    if threads:
        options.intra_op_num_threads = threads
    if profile:  # read back by `placements`
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tempfile.gettempdir(),
                                                   f"attndsl-profile-{os.getpid()}")
    source = model if isinstance(model, bytes) else os.fspath(model)
    providers: list = [wanted] + (["CPUExecutionProvider"] if provider != "cpu" else [])
    if provider == "cuda":
        # float32 is float32: the CUDA provider's default TF32 matrix products (10-bit mantissa)
        # put float32 models 4e-4 off on an H100, four times verify's tolerance
        cuda = {"use_tf32": "0"}
        if not arena:
            cuda["arena_extend_strategy"] = "kSameAsRequested"
        providers[0] = (wanted, cuda)
    try:
        session = ort.InferenceSession(source, options, providers=providers)
    except Exception as exc:
        raise ExportError(f"ONNX Runtime could not load the model: {exc}") from None
    target = session.get_modelmeta().custom_metadata_map.get("attndsl.target")
    if target:
        check_ort_version(target)
    if session.get_providers()[0] != wanted:
        raise ExportError(f"ONNX Runtime fell back to {session.get_providers()[0]} instead of "
                          f"{wanted}; refusing to report its results as `{provider}`")
    return session


def device_of(session) -> str:
    """'cuda' or 'cpu': where a session's inputs and outputs should live."""
    return "cuda" if session.get_providers()[0] == PROVIDERS["cuda"] else "cpu"


class Bound:
    """A session with its inputs and output bound to device buffers: `()` runs it (ORT
    synchronises the device before returning), `output()` reads y back as float32 NumPy.
    Buffers are ONNX Runtime's own (OrtValue), so running a model needs no torch; bfloat16,
    which NumPy cannot hand to ONNX Runtime, goes through torch tensors."""

    def __init__(self, session, inputs: Mapping[str, np.ndarray]):
        from onnxruntime import OrtValue

        self.session = session
        device = device_of(session)
        self.binding = session.io_binding()
        self.buffers = {}  # keeps the bound memory alive
        sizes: dict[str, int] = {}
        for meta in session.get_inputs():
            if meta.name not in inputs:
                raise ExportError(f"the model needs an input named `{meta.name}`")
            value = np.asarray(inputs[meta.name])
            kind = from_ort(meta.type)
            if kind is None:
                raise ExportError(f"input `{meta.name}` has type {meta.type}, which attndsl "
                                  "cannot feed")
            if kind == "bfloat16":
                self._bind_torch(meta.name, value, kind, device, input_=True)
            else:
                buffer = OrtValue.ortvalue_from_numpy(
                    np.ascontiguousarray(value.astype(kind)), device, 0)
                self.buffers[meta.name] = buffer
                self.binding.bind_ortvalue_input(meta.name, buffer)
            sizes.update({d: n for d, n in zip(meta.shape, value.shape, strict=False)
                          if isinstance(d, str)})
        out = session.get_outputs()[0]
        shape = [d if isinstance(d, int) else sizes.get(d) for d in out.shape]
        if "pixel_values" in inputs and len(shape) == 3:  # a vision stack's rows: its class
            shape[1] = image_rows(session, np.shape(inputs["pixel_values"]))  # token, patches
        kind = from_ort(out.type)
        if None in shape or kind is None:
            raise ExportError(f"cannot size output `{out.name}` {out.shape} from the inputs")
        self.through_torch = kind == "bfloat16"
        if self.through_torch:
            self.y = self._bind_torch(out.name, np.empty(shape), kind, device, input_=False)
        else:
            self.y = OrtValue.ortvalue_from_shape_and_type(shape, np.dtype(kind), device, 0)
            self.binding.bind_ortvalue_output(out.name, self.y)

    def _bind_torch(self, name: str, value: np.ndarray, kind: str, device: str, *,
                    input_: bool):
        import torch

        tensor = torch.from_numpy(np.ascontiguousarray(value)).to(
            device=device, dtype=getattr(torch, kind)).contiguous()
        self.buffers[name] = tensor
        bind = self.binding.bind_input if input_ else self.binding.bind_output
        bind(name, tensor.device.type, tensor.device.index or 0, ONNX_TYPE[kind],
             list(tensor.shape), tensor.data_ptr())
        return tensor

    def __call__(self) -> None:
        try:
            self.session.run_with_iobinding(self.binding)
        except Exception as exc:
            raise ExportError(f"ONNX Runtime failed: {str(exc).splitlines()[0]}") from None

    def output(self) -> np.ndarray:
        if self.through_torch:  # bfloat16
            return self.y.float().cpu().numpy()
        return np.asarray(self.binding.copy_outputs_to_cpu()[0], dtype=np.float32)


def image_rows(session, shape: tuple) -> int:
    """The rows a vision stack's model makes of an image of `shape` [B, C, H, W]: its class
    token and (H // P) (W // P) patches (UsageError below one patch, or with no spec)."""
    from ..run import spec_of  # (the model's own spec, in its metadata)

    spec = spec_of(session)
    if spec is None or getattr(spec, "patches", None) is None:
        raise UsageError("cannot size the rows of an image for a model that holds no "
                         "attndsl vision spec")
    p = spec.patches
    if len(shape) != 4 or min(shape[2:]) < p.size:
        raise UsageError(f"`pixel_values` must be an image [B, {p.channels}, H, W] of at least "
                         f"one patch ({p.size} x {p.size} pixels), got shape {list(shape)}")
    return p.rows(shape[2], shape[3])


def placements(session) -> dict[str, set[str]]:
    """op type -> the providers that ran nodes of it, from a profiled session's runs so far
    (ends its profiling)."""
    path = session.end_profiling()
    if not path:
        raise ExportError("the session was not created with profile=True")
    try:
        with open(path) as f:
            events = json.load(f)
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
    out: dict[str, set[str]] = {}
    for event in events:
        args = event.get("args", {}) if isinstance(event, dict) else {}
        if event.get("cat") == "Node" and "provider" in args and "op_name" in args:
            out.setdefault(args["op_name"], set()).add(args["provider"])
    return out


def off_device(where: Mapping[str, set[str]], provider: str) -> list[str]:
    """The heavy op types that ran somewhere other than `provider` (an ORT provider name)."""
    return sorted(op for op, providers in where.items()
                  if op in HEAVY_OPS and providers - {provider})


def require_on_device(session) -> None:
    """For a CUDA session (made with profile=True) that has run: ExportError unless every heavy
    node ran on CUDA. Nothing to check for a CPU session."""
    if device_of(session) == "cpu":
        return
    wrong = off_device(placements(session), PROVIDERS["cuda"])
    if wrong:
        raise ExportError(
            f"ONNX Runtime ran {', '.join(wrong)} on the CPU in a CUDA session (it has no CUDA "
            "kernel for the node's type); refusing to report the result as `cuda`\n"
            "  = help: compile for --target ort-cuda, whose plan uses only ops with CUDA "
            "kernels for the dtype")


def checked_runner(session):
    """inputs -> y; the first call also checks where the nodes ran (`require_on_device`)."""
    checked = False

    def run_checked(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        nonlocal checked
        y = run(session, inputs)
        if not checked:
            checked = True
            require_on_device(session)
        return y
    return run_checked


def run(session, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """One run; y as float32 NumPy whatever the model's dtype."""
    bound = Bound(session, inputs)
    bound()
    return bound.output()
