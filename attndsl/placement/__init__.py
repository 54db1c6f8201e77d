"""Where ONNX Runtime will run a model's nodes: for a provider, every node whose (domain, op,
opset version, element types) has no kernel there, which ONNX Runtime would place on the CPU
silently (or refuse), and every node a run-time rule rejects, each named with why.

`check(model, provider)` gives the findings; `require_placed` raises for them (compile runs
it for the planned targets, so a planned target never emits a node its provider lacks);
`attndsl check-placement MODEL.onnx --provider P` runs it on any ONNX file. The kernel tables
are ONNX Runtime's own (`tables`), the rules each cite their source (`rules`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache

import onnx

from ..errors import ExportError, UsageError
from .bindings import Node, _schemas, nodes, schema
from .rules import RULES
from .tables import PROVIDERS, Kernel, Table, table

__all__ = ["PROVIDERS", "Finding", "Placement", "check", "enforced", "load_graph", "node_keys",
           "op_runs", "reporting", "require_placed", "table"]

# ONNX Runtime turns these into initializers when it loads a model: they need no kernel
_LOAD_TIME = frozenset({("ai.onnx", "Constant")})


@dataclass(frozen=True)
class Finding:
    node: str  # "name (op)"
    path: str  # the graph it is in
    why: str
    rule: bool = False  # a run-time rejection rather than a missing kernel

    def text(self) -> str:
        where = "" if self.path == "graph" else f" in {self.path}"
        return f"{self.node}{where}: {self.why}"


@dataclass(frozen=True)
class Placement:
    provider: str
    source: str  # the kernel table's
    nodes: int
    findings: tuple[Finding, ...]

    def summary(self) -> str:
        head = f"placement on {PROVIDERS[self.provider]} ({table(self.provider).label})"
        if not self.findings:
            return f"{head}: every one of the {self.nodes} nodes has a kernel"
        return "\n".join([f"{head}: {len(self.findings)} of the {self.nodes} nodes would not "
                          "run there as planned"] + [f"  {f.text()}" for f in self.findings])


_ENFORCED: ContextVar[bool] = ContextVar("attndsl_placement_enforced", default=True)


@contextmanager
def reporting():
    """Within it, compile builds a planned model whatever the check finds (explain shows the
    findings; the GPU plan's scan measures them). So does ATTNDSL_PLACEMENT=report."""
    token = _ENFORCED.set(False)
    try:
        yield
    finally:
        _ENFORCED.reset(token)


def enforced() -> bool:
    return _ENFORCED.get() and os.environ.get("ATTNDSL_PLACEMENT") != "report"


def check(model: onnx.ModelProto, provider: str,
          constants: set[str] | None = None) -> Placement:
    """The placement of `model`'s nodes on `provider` ("cpu" or "cuda"). A node of the main
    graph computed from constants alone (its initializers, or `constants`: the names of a
    skeleton's initializers turned inputs) is left out: ONNX Runtime folds it when it loads
    the model, on the CPU."""
    kernels = table(provider)
    found = list(_opset_findings(model))
    every = nodes(model)
    for node in _looked_up(model, every, constants):
        why = _missing(node, kernels)
        if why:
            found.append(Finding(node.label, node.path, why))
            continue
        key = f"{node.proto.domain or 'ai.onnx'}.{node.proto.op_type}"
        for rule in RULES:
            if provider in rule.providers and rule.op == key and rule.rejects(node):
                found.append(Finding(node.label, node.path,
                                     f"loads, and is rejected when it runs: {rule.why} "
                                     f"({rule.source})", rule=True))
    return Placement(provider, kernels.source, len(every), tuple(found))


def _looked_up(model: onnx.ModelProto, every: list[Node],
               constants: set[str] | None = None) -> Iterator[Node]:
    """The nodes of `every` that ONNX Runtime looks a kernel up for: not a `Constant` (made an
    initializer at load), nor a node of the main graph computed from constants alone (folded
    at load, on the CPU: the model's initializers, or `constants`); a subgraph's nodes all."""
    fixed = {t.name for t in model.graph.initializer} | set(constants or ())
    dynamic = {i.name for i in model.graph.input} - fixed
    for node in every:
        proto = node.proto
        if (proto.domain or "ai.onnx", proto.op_type) in _LOAD_TIME:
            continue
        if node.path == "graph":
            if not any(i in dynamic for i in proto.input):
                continue
            dynamic.update(proto.output)
        yield node


def _opset_findings(model: onnx.ModelProto):
    """An opset of the standard domain newer than any schema ONNX Runtime knows: it refuses
    the model when it loads it."""
    newest = max((s.since for (d, _), ss in _schemas().items() if d == "ai.onnx" for s in ss),
                 default=0)
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > newest:
            yield Finding("(the model)", "graph", f"it imports opset {o.version} of the "
                          f"standard domain; ONNX Runtime knows opsets up to {newest}")


def _missing(node: Node, kernels: Table) -> str | None:
    """Why `node` has no kernel in `kernels`, or None."""
    proto = node.proto
    domain = proto.domain or "ai.onnx"
    name = PROVIDERS[kernels.provider]
    if node.since is None:
        return (f"ONNX Runtime knows no op {domain}.{proto.op_type} at the model's opset of "
                f"{domain} (or the model imports no opset of it)")
    candidates = kernels.of(domain, proto.op_type)
    if not candidates:
        return f"{name} has no kernel for {proto.op_type}"
    versioned = [k for k in candidates if k.covers(node.since)]
    if not versioned:
        return (f"{name} has no kernel for {proto.op_type}-{node.since} (its kernels cover "
                f"opset {', '.join(k.versions() for k in candidates)})")
    if any(_takes(k, node.bindings) for k in versioned):
        return None
    if kernels.provider == "cpu" and any(_takes(k, _widened(node.bindings)) for k in versioned):
        return None  # ONNX Runtime's CPU provider runs it in float32 between inserted Casts
    bound = ", ".join(f"{c} = {t}" for c, t in sorted(node.bindings.items()))
    takes = "; ".join(", ".join(f"{c} = {'|'.join(sorted(ts))}"
                                for c, ts in sorted(k.types.items())) for k in versioned)
    return (f"{name} has no kernel for {proto.op_type}-{node.since} with {bound} (its kernels "
            f"take {takes})")


# the domain and opset of the ops the planner asks about, as attndsl emits them
_OPSETS = {"ai.onnx": 23, "com.microsoft": 1}  # backends/onnx.py's OPSET, the contrib domain's


@cache  # asked at every lowering of an op on a bfloat16 value; the tables do not change
def op_runs(op: str, dtype: str, provider: str) -> bool:
    """Whether `provider` runs `op` as attndsl emits it (its domain, at attndsl's opset) on
    `dtype` values ("float32", "float16", "bfloat16"): a kernel whose T takes the dtype, or,
    on the CPU, float16 in float32 between the Casts ONNX Runtime inserts."""
    # the standard op where ONNX has one at attndsl's opset (Gelu), else the contrib op
    found, domain = schema("ai.onnx", op, _OPSETS["ai.onnx"]), "ai.onnx"
    if found is None:
        found, domain = schema("com.microsoft", op, _OPSETS["com.microsoft"]), "com.microsoft"
    if found is None:
        return False
    elem = "float" if dtype == "float32" else dtype
    # the constraint of the op's first floating-point input (Where's T, MatMulNBits' T1, ...)
    data = next((p.type_str for p in found.inputs if any(
        t in found.constraints.get(p.type_str, ()) for t in ("tensor(float)", "tensor(float16)"))),
        "T")
    kernels = [k for k in table(provider).of(domain, op) if k.covers(found.since)]
    if any(elem in k.types.get(data, {elem}) for k in kernels):
        return True
    return provider == "cpu" and elem == "float16" and any(
        "float" in k.types.get(data, {"float"}) for k in kernels)


def _widened(bindings: dict[str, str]) -> dict[str, str]:
    return {c: "float" if t == "float16" else t for c, t in bindings.items()}


def _takes(kernel: Kernel, bindings: dict[str, str]) -> bool:
    return all(bindings[c] in types for c, types in kernel.types.items() if c in bindings)


def require_placed(model: onnx.ModelProto, provider: str, what: str,
                   constants: set[str] | None = None) -> None:
    """ExportError naming every node of `model` that `provider` would not run as planned."""
    placement = check(model, provider, constants)
    if placement.findings:
        raise ExportError(
            f"{what} has nodes {PROVIDERS[provider]} would not run as planned:\n"
            + "\n".join(f"  {f.text()}" for f in placement.findings)
            + "\n  = help: this is a gap in attndsl's plan for the target; compile with "
              "--target portable meanwhile, and report it")


def node_keys(model: onnx.ModelProto, not_found: set[str]) -> tuple[set, set]:
    """(placed, missing): the kernel keys (domain, op, opset, ((constraint, type), ...)) of
    the nodes ONNX Runtime looks a kernel up for, split by whether a provider's log named the
    node as having none (`not_found`, node names). Nodes computed from constants alone are
    left out (ONNX Runtime folds them when it loads the model); a subgraph's nodes count."""
    placed, missing = set(), set()
    for node in _looked_up(model, nodes(model)):
        proto = node.proto
        key = (proto.domain or "ai.onnx", proto.op_type, node.since,
               tuple(sorted(node.bindings.items())))
        (missing if proto.name in not_found else placed).add(key)
    return placed, missing


def load_graph(path) -> onnx.ModelProto:
    """An ONNX file's graph without its external data (the check needs none)."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a folder, not an ONNX model") from None
    except Exception as exc:  # protobuf's DecodeError and its kin
        raise UsageError(f"{path}: not an ONNX model ({type(exc).__name__})") from None
    if not model.HasField("graph") or not model.opset_import:
        raise UsageError(f"{path}: not an ONNX model ONNX Runtime loads (it has "
                         f"{'no opset import' if model.HasField('graph') else 'no graph'})")
    return model
