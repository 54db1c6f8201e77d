"""Multimodal RoPE on ONNX Runtime's CUDA provider: whether onnxruntime-gpu has an
MRotaryEmbedding kernel for each dtype, and whether attndsl's ort-cuda exports with multimodal
RoPE give the reference's outputs there.

  # here (CPU): the models and the outputs they must give
  .venv/bin/python tools/gpu_mrope.py prepare gpu-mrope
  # on the GPU machine (onnxruntime-gpu installed): each model on the CUDA provider
  python tools/gpu_mrope.py run gpu-mrope

`prepare` writes, under OUT:
- `probe-<dtype>.onnx`: one com.microsoft.MRotaryEmbedding node (4-D input, partial rotary
  dim, interleaved sections), with the CPU provider's output as the expected one;
- `vl-<dtype>[-fused].onnx`: examples/qwen_vl_mrope.attn's language model for ort-cuda, as
  attndsl plans it from its CUDA table, and (`-fused`) as it would plan it were
  MRotaryEmbedding in that table, with the NumPy reference's logits as the expected ones;
- `qwen3_5.onnx`: Qwen3.5's text model imported from a tiny checkpoint (transformers), with
  Qwen3_5ForCausalLM's logits for the same 3-D position ids as the expected ones.
`run` runs each on the CUDA provider in its own process (its verbose log read for nodes
without a CUDA kernel) and writes OUT/results.json and OUT/placement-keys.json, the kernel keys
of the nodes the CUDA provider took or lacked (for tools/kernel_tables.py measured)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DTYPES = ("float32", "float16", "bfloat16")


def _probe(dtype: str):
    """One MRotaryEmbedding node over (B, h, n, d) = (2, 4, 9, 32): rotary dim 24, the
    interleaved layout with sections [4, 4, 4]."""
    import onnx
    from onnx import TensorProto, helper

    elem = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
            "bfloat16": TensorProto.BFLOAT16}[dtype]
    node = helper.make_node("MRotaryEmbedding", ["x", "position_ids", "cos", "sin"], ["y"],
                            domain="com.microsoft", mrope_section=[4, 4, 4], mrope_layout=1,
                            rotary_embedding_dim=24, num_heads=4)
    graph = helper.make_graph(
        [node], "probe",
        [helper.make_tensor_value_info("x", elem, [2, 4, 9, 32]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, [3, 2, 9]),
         helper.make_tensor_value_info("cos", elem, [40, 12]),
         helper.make_tensor_value_info("sin", elem, [40, 12])],
        [helper.make_tensor_value_info("y", elem, [2, 4, 9, 32])])
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23),
                                                        helper.make_opsetid("com.microsoft", 1)],
                                  ir_version=10)


def _np(dtype: str):
    import ml_dtypes

    return {"float32": np.float32, "float16": np.float16,
            "bfloat16": ml_dtypes.bfloat16}[dtype]


def prepare(out: Path) -> None:
    import os

    import onnxruntime as ort

    import attndsl
    from attndsl.backends import reference
    from attndsl.planner import rewrites

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    expected = {}
    probe32 = ort.InferenceSession(_probe("float32").SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for dtype in DTYPES:
        path = out / f"probe-{dtype}.onnx"
        path.write_bytes(_probe(dtype).SerializeToString())
        angle = np.arange(40)[:, None] * 10000.0 ** (-np.arange(12) / 12)

        kind = _np(dtype)  # float32 values the dtype holds exactly
        feed = {"x": rng.standard_normal((2, 4, 9, 32)).astype(kind).astype(np.float32),
                "position_ids": rng.integers(0, 40, (3, 2, 9)).astype(np.int64),
                "cos": np.cos(angle).astype(kind).astype(np.float32),
                "sin": np.sin(angle).astype(kind).astype(np.float32)}
        # the CPU provider's float32 kernel on the same values
        expected[path.name] = (feed, probe32.run(None, feed)[0].astype(np.float64), dtype)
    layer = attndsl.load(ROOT / "examples" / "qwen_vl_mrope.attn")["qwen_vl_decoder"]
    ids = rng.integers(0, 1000, (2, 37)).astype(np.int64)
    pos = rng.integers(0, 60, (3, 2, 37)).astype(np.int64)
    weights = {k: v.detach().double().numpy()
               for k, v in layer.to_torch(seed=1).state_dict().items()}
    want = reference.run(layer.graph(), {"input_ids": ids, "position_ids": pos}, weights)
    plain = rewrites.has_kernel
    for fused in (False, True):
        if fused:  # as if the CUDA table had the kernel (the check reports, not refuses)
            rewrites.has_kernel = lambda op, dtype, provider: (
                op == "MRotaryEmbedding" or plain(op, dtype, provider))
            os.environ["ATTNDSL_PLACEMENT"] = "report"
        for dtype in DTYPES:
            name = f"vl-{dtype}{'-fused' if fused else ''}.onnx"
            (out / name).write_bytes(layer.onnx_bytes(target="ort-cuda", seed=1, dtype=dtype))
            expected[name] = ({"input_ids": ids, "position_ids": pos}, want, dtype)
    rewrites.has_kernel = plain
    os.environ.pop("ATTNDSL_PLACEMENT", None)
    expected["qwen3_5.onnx"] = _qwen3_5(out / "qwen3_5.onnx", rng)
    np.savez(out / "expected.npz", **{
        f"{name}|{key}": value for name, (feed, want, dtype) in expected.items()
        for key, value in [*((f"in:{k}", v) for k, v in feed.items()), ("want", want)]})
    (out / "dtypes.json").write_text(json.dumps({n: e[2] for n, e in expected.items()}))
    print(f"prepared {len(expected)} models in {out}")


def _qwen3_5(path: Path, rng) -> tuple:
    import tempfile

    import torch
    import transformers as tf

    import attndsl
    from attndsl.cli import main

    config = tf.Qwen3_5TextConfig(
        hidden_size=64, intermediate_size=80, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=8, vocab_size=61,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5, "mrope_section": [3, 2, 2]})
    torch.manual_seed(0)
    model = tf.Qwen3_5ForCausalLM(config).eval()
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        spec = Path(tmp) / "q.attn"
        assert main(["import", tmp, "-o", str(spec)]) == 0
        program = attndsl.load(spec)
        name = next(n for n in program if getattr(program[n].spec, "vocab", None))
        path.write_bytes(program[name].onnx_bytes(target="ort-cuda", weights=tmp))
    ids = rng.integers(3, 61, (2, 11)).astype(np.int64)
    pos = rng.integers(0, 25, (3, 2, 11)).astype(np.int64)
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids),
                     position_ids=torch.from_numpy(pos)).logits.double().numpy()
    return {"input_ids": ids, "position_ids": pos}, want, "float32"


def one(model: Path, out: Path) -> None:
    """Run `model` on the CUDA provider (verbose log on stderr); print its result as JSON."""
    import torch  # noqa: F401, I001 (its CUDA libraries, before onnxruntime's)
    import onnxruntime as ort

    sys.path.insert(0, str(ROOT))
    from attndsl.backends import runtime

    data = np.load(out / "expected.npz")
    feed = {k.split("|in:")[1]: data[k] for k in data.files
            if k.startswith(f"{model.name}|in:")}
    want = data[f"{model.name}|want"]
    options = ort.SessionOptions()
    options.log_severity_level = 1
    session = ort.InferenceSession(str(model), options, providers=[
        ("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"])  # (as verify)
    got = runtime.run(session, feed).astype(np.float64)  # (inputs cast to the model's types)
    print(json.dumps({"providers": session.get_providers(),
                      "err": float(np.abs(got - want).max())}))


def run(out: Path) -> None:
    import onnx

    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    from gpu_plan_steps import not_found, write_keys

    from attndsl.placement import node_keys
    from attndsl.verify import tolerance

    rows, placed, lacking = [], set(), set()
    data = np.load(out / "expected.npz")
    for model in sorted(out.glob("*.onnx")):
        dtype = json.loads((out / "dtypes.json").read_text())[model.name]
        proc = subprocess.run([sys.executable, __file__, "one", str(model), str(out)],
                              capture_output=True, text=True, timeout=300)
        proto = onnx.load(model)
        logged = not_found(proc.stderr.splitlines())
        have, lack = node_keys(proto, logged)
        if not proc.returncode:  # (a session that failed before placing its nodes says nothing)
            placed |= have
        lacking |= lack
        mrotary = sum(n.op_type == "MRotaryEmbedding" for n in proto.graph.node)
        row = {"model": model.name, "dtype": dtype, "MRotaryEmbedding nodes": mrotary,
               "no CUDA kernel": sorted(logged)}
        if proc.returncode:
            row["error"] = proc.stderr.strip().splitlines()[-1][:300]
        else:
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            tol = tolerance(data[f"{model.name}|want"], dtype)
            row |= {"cuda": result["providers"][0] == "CUDAExecutionProvider",
                    "err": result["err"], "tolerance": tol, "pass": result["err"] <= tol}
        rows.append(row)
        print(json.dumps(row), flush=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    write_keys(out / "placement-keys.json", placed, lacking)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("prepare", "run", "one"))
    p.add_argument("path", help="the models' folder (one: a model, then the folder)")
    p.add_argument("folder", nargs="?")
    a = p.parse_args()
    if a.step == "prepare":
        prepare(Path(a.path))
    elif a.step == "run":
        run(Path(a.path))
    else:
        one(Path(a.path), Path(a.folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
