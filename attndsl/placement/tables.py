"""ONNX Runtime's kernel tables: for a provider, every registered kernel as (domain, op, the
opset versions it covers, the types each of its type constraints takes).

The CPU provider's table is read from the installed onnxruntime when that is the CPU build
(`get_all_opkernel_def()`); a GPU build's reading of it loads every provider library it ships
(TensorRT's too, which crashes where TensorRT is not installed), so there, and where no
onnxruntime is installed, the CPU table is the snapshot shipped beside this file. The CUDA
provider's is the snapshot of ONNX Runtime 1.31's generated docs/OperatorKernels.md, shipped
beside this file with its source; `tools/kernel_tables.py` regenerates both."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..errors import UsageError

__all__ = ["PROVIDERS", "Kernel", "Table", "from_rows", "installed_cpu_rows", "measured",
           "table"]

# attndsl's provider names -> ONNX Runtime's
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
_HERE = Path(__file__).parent
_MAX = 2**31 - 1  # an open version range's end, as ONNX Runtime writes it


@dataclass(frozen=True)
class Kernel:
    since: int  # the opset versions it covers: since..until, both included
    until: int
    types: dict[str, frozenset[str]]  # type constraint -> element types ("float16", ...)

    def covers(self, since: int) -> bool:
        """Whether it runs a node whose schema dates from opset `since`. As ONNX Runtime
        matches (KernelRegistry::VerifyKernelDef): an open range ("6+") covers its first
        version alone, since a later version of the op may mean what the kernel does not."""
        return self.since == since or (self.until < _MAX and self.since <= since <= self.until)

    def versions(self) -> str:
        return f"{self.since}+" if self.until >= _MAX else (
            str(self.since) if self.since == self.until else f"[{self.since}, {self.until}]")


@dataclass(frozen=True)
class Table:
    provider: str  # "cpu" or "cuda"
    source: str  # where it was read, in full (check-placement --json, docs)
    label: str  # the same in a few words, for messages
    kernels: dict[tuple[str, str], tuple[Kernel, ...]]  # (domain, op) -> its kernels

    def of(self, domain: str, op: str) -> tuple[Kernel, ...]:
        return self.kernels.get((_domain(domain), op), ())


def _domain(domain: str) -> str:
    return "ai.onnx" if domain in ("", "ai.onnx") else domain


def _elem(type_str: str) -> str:
    """"tensor(float16)" -> "float16"; other kinds (seq(...), map(...)) as they are."""
    return type_str[7:-1] if type_str.startswith("tensor(") else type_str


def from_rows(provider: str, source: str, rows, label: str = "") -> Table:
    """A table from rows of (domain, op, since, until, {constraint: [type strings]})."""
    kernels: dict[tuple[str, str], list[Kernel]] = {}
    for domain, op, since, until, types in rows:
        takes = {c: frozenset(_elem(t) for t in ts) for c, ts in types.items()}
        kernels.setdefault((_domain(domain), op), []).append(Kernel(int(since), int(until), takes))
    return Table(provider, source, label or source, {k: tuple(v) for k, v in kernels.items()})


@cache
def table(provider: str) -> Table:
    """The kernel table of `provider` ("cpu" or "cuda")."""
    if provider not in PROVIDERS:
        raise UsageError(f"unknown provider `{provider}`: choose from {', '.join(PROVIDERS)}")
    if provider == "cpu":
        live = _installed_cpu()
        if live is not None:
            return live
    return _shipped(provider)


def installed_cpu_rows() -> tuple[str, list[list]] | None:
    """(version, rows) of the installed onnxruntime's CPU kernels, each row [domain, op,
    since, until, {constraint: [type strings]}], or None where it is not the CPU build."""
    try:
        import onnxruntime as ort
        from onnxruntime.capi.onnxruntime_pybind11_state import get_all_opkernel_def
    except ImportError:
        return None
    if set(ort.get_available_providers()) - {"CPUExecutionProvider", "AzureExecutionProvider"}:
        return None  # a GPU build: see the module's docstring
    return ort.__version__, [
        [k.domain or "ai.onnx", k.op_name, *k.version_range,
         {c: sorted(t) for c, t in sorted(k.type_constraints.items())}]
        for k in get_all_opkernel_def() if k.provider == PROVIDERS["cpu"]]


def _installed_cpu() -> Table | None:
    found = installed_cpu_rows()
    if found is None:
        return None
    version, rows = found
    return from_rows("cpu", f"the installed onnxruntime {version}'s get_all_opkernel_def()",
                     rows, f"onnxruntime {version}'s kernels")


def _shipped(provider: str, with_measured: bool = True) -> Table:
    data = json.loads((_HERE / f"{provider}.json").read_text())
    rows, source = data["kernels"], data["source"]
    extra = measured(provider) if with_measured else {"kernels": []}
    if extra["kernels"]:  # what a GPU's run found that the generated table lacks
        rows = rows + extra["kernels"]
        source = f"{source}, with {len(extra['kernels'])} kernels {extra['source']}"
    return from_rows(provider, source, rows, f"onnxruntime {data['onnxruntime']}'s kernel table")


def measured(provider: str) -> dict:
    """What a GPU's run found beside the generated table (`<provider>-measured.json`): its
    `kernels` and the `missing` keys, or empty lists."""
    path = _HERE / f"{provider}-measured.json"
    return json.loads(path.read_text()) if path.exists() else {"kernels": [], "missing": []}
