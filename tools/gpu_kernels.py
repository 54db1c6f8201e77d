"""Which op versions onnxruntime-gpu's CUDA provider has a kernel for, measured one node at a
time: the standard ops whose newest version (at attndsl's opset) the generated CUDA table
lacks while it has a kernel for an older one, where the table alone would call a node of
another tool's model unplaced.

  # here (CPU): one model per op and dtype, and its inputs
  .venv/bin/python tools/gpu_kernels.py prepare gpu-kernels
  # on the GPU machine (onnxruntime-gpu installed)
  python tools/gpu_kernels.py run gpu-kernels
  # back here: the measurement, merged into attndsl/placement/cuda-measured.json
  .venv/bin/python tools/kernel_tables.py measured --merge --keys gpu-kernels/placement-keys.json \\
      --device "NVIDIA H100" --version 1.31.1

`run` creates every model's session on the CUDA provider in one process, its verbose log read
for the nodes ONNX Runtime found no CUDA kernel for (each node is named after its model), runs
each once, and writes OUT/placement-keys.json (the kernel keys of the nodes placed and of
those lacking a kernel) and OUT/results.json."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OPSET = 23
DTYPES = ("float", "float16", "bfloat16")


def lacking(opset: int = OPSET) -> list[tuple[str, int]]:
    """(op, newest version at `opset`) of the standard ops the shipped CUDA table has a kernel
    for, but not one covering that version."""
    from onnx import defs

    sys.path.insert(0, str(ROOT))
    from attndsl.placement.tables import _shipped

    table = _shipped("cuda", with_measured=True)
    out = []
    for name in sorted({s.name for s in defs.get_all_schemas() if s.domain == ""}):
        try:
            schema = defs.get_schema(name, opset, "")
        except defs.SchemaError:  # an op newer than the opset
            continue
        kernels = table.of("ai.onnx", name)
        if not schema.deprecated and kernels and not any(
                k.covers(schema.since_version) for k in kernels):
            out.append((name, schema.since_version))
    return out


def _node(op: str, dtype: str):
    """(node, its inputs (name, element type, values), its output's element type): a
    one-node model of `op` in `dtype`, the node named `<op>_<dtype>`."""
    from onnx import TensorProto, helper

    f = {"float": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
         "bfloat16": TensorProto.BFLOAT16}[dtype]
    rng = np.random.default_rng(0)

    def x(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    name = f"{op}_{dtype}"
    unary = {"Elu": {}, "Selu": {}, "Softsign": {}, "ThresholdedRelu": {}, "Round": {},
             "EyeLike": {}, "Dropout": {}, "Flatten": {"axis": 1},
             "GlobalAveragePool": {}, "GlobalMaxPool": {},
             "MaxPool": {"kernel_shape": [2, 2]}, "RandomNormalLike": {},
             "RandomUniformLike": {}}
    shapes = {"EyeLike": (3, 3), "Flatten": (2, 3, 4), "GlobalAveragePool": (1, 2, 3, 3),
              "GlobalMaxPool": (1, 2, 3, 3), "MaxPool": (1, 1, 4, 4)}
    if op in unary:
        inputs = [("x", f, x(*shapes.get(op, (2, 3))))]
        return helper.make_node(op, ["x"], ["y"], name=name, **unary[op]), inputs, f
    if op in ("RandomNormal", "RandomUniform"):
        return helper.make_node(op, [], ["y"], name=name, shape=[2, 3], dtype=f), [], f
    if op == "Size":
        return helper.make_node(op, ["x"], ["y"], name=name), [("x", f, x(2, 3))], \
            TensorProto.INT64
    if op == "ReduceMin":
        return helper.make_node(op, ["x", "axes"], ["y"], name=name), [
            ("x", f, x(2, 3)), ("axes", TensorProto.INT64, np.array([1], np.int64))], f
    if op == "ConvTranspose":
        return helper.make_node(op, ["x", "w"], ["y"], name=name), [
            ("x", f, x(1, 2, 5, 5)), ("w", f, x(2, 3, 3, 3))], f
    if op == "InstanceNormalization":
        return helper.make_node(op, ["x", "s", "b"], ["y"], name=name), [
            ("x", f, x(1, 2, 3, 3)), ("s", f, x(2)), ("b", f, x(2))], f
    if op == "RoiAlign":
        rois = np.array([[0.0, 0.0, 3.0, 3.0]], np.float32)
        return helper.make_node(op, ["x", "rois", "i"], ["y"], name=name), [
            ("x", f, x(1, 1, 4, 4)), ("rois", f, rois),
            ("i", TensorProto.INT64, np.zeros(1, np.int64))], f
    if op == "DequantizeLinear":
        return helper.make_node(op, ["q", "s"], ["y"], name=name), [
            ("q", TensorProto.INT8, np.arange(-3, 3, dtype=np.int8)),
            ("s", f, np.array(0.5, np.float32))], f
    if op == "QuantizeLinear":
        return helper.make_node(op, ["x", "s", "z"], ["y"], name=name), [
            ("x", f, x(6)), ("s", f, np.array(0.5, np.float32)),
            ("z", TensorProto.INT8, np.array(0, np.int8))], TensorProto.INT8
    if op in ("GRU", "LSTM", "RNN"):
        gates = {"GRU": 3, "LSTM": 4, "RNN": 1}[op]
        return helper.make_node(op, ["x", "w", "r"], ["y"], name=name, hidden_size=4), [
            ("x", f, x(2, 1, 3)), ("w", f, x(1, gates * 4, 3)),
            ("r", f, x(1, gates * 4, 4))], f
    if op == "Loop":  # two trips adding 1 to a carried value
        body = helper.make_graph(
            [helper.make_node("Identity", ["cond_in"], ["cond_out"], name=f"{name}_cond"),
             helper.make_node("Add", ["v_in", "one"], ["v_out"], name=f"{name}_add")],
            "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                     helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                     helper.make_tensor_value_info("v_in", f, [2])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("v_out", f, [2])],
            [helper.make_tensor("one", f, [], [1.0])])
        return helper.make_node(op, ["m", "c", "v"], ["y"], name=name, body=body), [
            ("m", TensorProto.INT64, np.array(2, np.int64)),
            ("c", TensorProto.BOOL, np.array(True)), ("v", f, x(2))], f
    raise ValueError(f"no probe for {op}")


def prepare(out: Path) -> None:
    from onnx import helper

    out.mkdir(parents=True, exist_ok=True)
    feeds, names = {}, []
    for op, _version in lacking():
        for dtype in DTYPES:
            node, inputs, out_elem = _node(op, dtype)
            graph = helper.make_graph(
                [node], node.name,
                [helper.make_tensor_value_info(n, e, list(v.shape)) for n, e, v in inputs],
                [helper.make_tensor_value_info("y", out_elem, None)])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                      ir_version=10)
            (out / f"{node.name}.onnx").write_bytes(model.SerializeToString())
            feeds |= {f"{node.name}|{n}": v for n, _e, v in inputs}
            names.append(node.name)
    np.savez(out / "inputs.npz", **feeds)
    print(f"prepared {len(names)} models of {len(names) // len(DTYPES)} ops in {out}")


def sessions(out: Path) -> None:
    """(In a child process, the log on stderr.) Each model's session on CUDA, run once: a
    JSON line per model on stdout."""
    import torch  # noqa: F401, I001 (its CUDA libraries, before onnxruntime's)
    import onnxruntime as ort

    sys.path.insert(0, str(ROOT))
    from attndsl.backends import runtime

    ort.set_default_logger_severity(1)
    data = np.load(out / "inputs.npz")
    for model in sorted(out.glob("*.onnx")):
        feed = {k.split("|")[1]: data[k] for k in data.files if k.startswith(f"{model.stem}|")}
        row = {"model": model.stem}
        try:
            options = ort.SessionOptions()
            options.log_severity_level = 1
            session = ort.InferenceSession(str(model), options, providers=[
                "CUDAExecutionProvider", "CPUExecutionProvider"])
            row["cuda"] = session.get_providers()[0] == "CUDAExecutionProvider"
            if model.stem.endswith("_bfloat16"):  # (NumPy has no bfloat16: through torch)
                runtime.run(session, feed)
            else:
                half = model.stem.endswith("_float16")
                session.run(None, {k: v.astype(np.float16) if half and v.dtype == np.float32
                                   else v for k, v in feed.items()})
            row["ran"] = True
        except Exception as e:  # (reported per model)
            row["error"] = str(e).splitlines()[0][:300]
        print(json.dumps(row), flush=True)


def run(out: Path) -> None:
    import onnx

    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    from gpu_plan_steps import not_found, write_keys

    from attndsl.placement import node_keys

    proc = subprocess.run([sys.executable, __file__, "sessions", str(out)],
                          capture_output=True, text=True, timeout=1200)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    logged = not_found(proc.stderr.splitlines())
    placed, missing = set(), set()
    for row in rows:
        model = onnx.load(out / f"{row['model']}.onnx")
        have, lack = node_keys(model, logged)
        if row.get("cuda"):  # (a session that failed before placing its nodes says nothing)
            placed |= have
        missing |= lack
        row["no CUDA kernel"] = sorted(n for n in logged if n == row["model"]
                                       or n.startswith(f"{row['model']}_"))
    (out / "results.json").write_text(json.dumps(rows, indent=1))

    write_keys(out / "placement-keys.json", placed, missing)
    for row in rows:
        print(json.dumps(row))
    print(f"{len(placed)} keys placed, {len(missing)} without a CUDA kernel", file=sys.stderr)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("prepare", "run", "sessions"))
    p.add_argument("folder")
    a = p.parse_args()
    {"prepare": prepare, "run": run, "sessions": sessions}[a.step](Path(a.folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
