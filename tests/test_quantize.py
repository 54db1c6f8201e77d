"""Quantized exports (`--quantize int4|int8`, docs/QUANTIZATION.md): the documented
arithmetic is what ONNX Runtime's MatMulNBits and GatherBlockQuantized compute; a quantized
model equals the oracle run on the dequantized weights; every projection is quantized; the
files shrink; and a quantized language model generates, through `attndsl generate` and
onnxruntime-genai, the greedy tokens of the transformers model whose weights were replaced by
the dequantized ones."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import transformers as tf
from onnx import TensorProto, helper, numpy_helper

import attndsl
from attndsl.backends import reference
from attndsl.cli import main
from attndsl.ir import build
from attndsl.quantize import Quantization, dequantize, dequantized, quantize, quantized_weights
from attndsl.weight_table import seeded_weights, weight_table

from .conftest import EXAMPLES
from .test_generation import NEW, PROMPTS, SIZES, _transformers_tokens, genai_generates
from .test_hf_families import redraw

FORMS = [Quantization(bits, block, symmetric, 0) for bits in (4, 8)
         for block, symmetric in ((32, True), (16, False), (64, True))]


@pytest.mark.parametrize("q", FORMS, ids=lambda q: q.text())
def test_the_documented_blocks_are_what_matmulnbits_computes(q: Quantization) -> None:
    """x @ dequantize(W)^T equals MatMulNBits on the stored blocks exactly, K a multiple of
    the block or not; and dequantize(W) is within a step of W."""
    rng = np.random.default_rng(q.bits * q.block)
    for n, k in ((24, 70), (5, q.block), (3, 1)):
        w = rng.standard_normal((n, k)).astype(np.float32)
        qw = quantize(w, q)
        inputs = [numpy_helper.from_array(qw.data, "B"), numpy_helper.from_array(qw.scales, "S")]
        if qw.zero_points is not None:
            inputs.append(numpy_helper.from_array(qw.zero_points, "Z"))
        node = helper.make_node("MatMulNBits", ["x", *(t.name for t in inputs)], ["y"],
                                domain="com.microsoft", K=k, N=n, bits=q.bits,
                                block_size=q.block)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
            "x", TensorProto.FLOAT, [3, k])], [helper.make_tensor_value_info(
                "y", TensorProto.FLOAT, None)], inputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                        helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = 10
        x = rng.standard_normal((3, k)).astype(np.float32)
        got = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
        d = dequantize(qw, q)
        assert np.abs(got - x @ d.T).max() <= 1e-5 * max(1.0, float(np.abs(got).max()))
        step = np.abs(np.repeat(qw.scales, q.block, axis=1)[:, :k])  # each value's step
        assert (np.abs(d - w) <= step * (1 + 1e-5) + 1e-7).all()  # within one step


LMS = [(p, n) for p in EXAMPLES if p.stem in ("llama_lm", "gemma_softcap", "qwen3_next_hybrid")
       for n in attndsl.load(p) if getattr(attndsl.load(p)[n].spec, "vocab", None)]


@pytest.mark.parametrize(("path", "name"), LMS, ids=[f"{p.stem}:{n}" for p, n in LMS])
@pytest.mark.parametrize("bits", [4, 8])
def test_a_quantized_model_is_the_oracle_on_the_dequantized_weights(path, name, bits) -> None:
    """accuracy_level 0 (float activations): within float32 rounding of the reference on the
    dequantized weights; every weight a linear node alone reads is stored in blocks (no float
    copy of it in the model), and the quantization's own error is reported apart (it is not
    zero)."""
    layer = attndsl.load(path)[name]
    q = Quantization(bits, 32, bits == 4, 0)
    data = layer.onnx_model(target="ort-cpu", quantize=q).bytes()
    assert data == layer.onnx_model(target="ort-cpu", quantize=q).bytes()  # same bytes
    proto = onnx.load_from_string(data)
    graph = build(layer.spec)
    names = quantized_weights(graph, q)
    floats = {t.name for t in proto.graph.initializer}
    assert names and not floats & set(names)
    ops = [n.op_type for n in proto.graph.node]
    linears = {n.args[0] for n in graph.nodes if n.op.value == "linear"}  # GEMMs: one an input
    assert ops.count("MatMulNBits") >= len(linears) and "MatMul" not in [
        n.op_type for n in proto.graph.node if any(i in floats for i in n.input)]
    ids = np.random.default_rng(1).integers(0, layer.spec.vocab, (2, 11))
    got = ort.InferenceSession(proto.SerializeToString()).run(None, {"input_ids": ids})[0]
    weights = seeded_weights(weight_table(layer.spec), 0)
    want = reference.run(graph, {"input_ids": ids}, dequantized(weights, names, q))
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max()))
    assert np.abs(reference.run(graph, {"input_ids": ids}, weights) - want).max() > 1e-4


def _llama(tmp_path: Path):
    config = tf.LlamaConfig(num_hidden_layers=2, head_dim=16, tie_word_embeddings=False,
                            bos_token_id=1, eos_token_id=2, **(SIZES | {"hidden_size": 64}))
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 11, unit_offset=False)
    folder = tmp_path / "hf"
    model.save_pretrained(folder)
    spec = tmp_path / "llama.attn"
    assert main(["import", str(folder), "-o", str(spec)]) == 0
    return model, folder, spec


@pytest.mark.parametrize("bits", [4, 8])
def test_a_quantized_llama_generates_the_dequantized_models_tokens(tmp_path, bits,
                                                                   capsys) -> None:
    og = pytest.importorskip("onnxruntime_genai")
    model, folder, spec = _llama(tmp_path)
    out, full = tmp_path / "q", tmp_path / "f"
    argv = ["compile", str(spec), "--export", "genai", "--weights", str(folder)]
    assert main([*argv, "-o", str(full)]) == 0
    assert main([*argv, "-o", str(out), "--quantize", f"int{bits}", "--quant-accuracy",
                 "0"]) == 0
    size = sum(f.stat().st_size for f in (out / "llama").iterdir())
    float_size = sum(f.stat().st_size for f in (full / "llama").iterdir())
    assert size <= (0.3 if bits == 4 else 0.55) * float_size, size / float_size
    meta = {p.key: p.value for p in onnx.load(out / "llama" / "model.onnx").metadata_props}
    assert meta["attndsl.quantization"].startswith(f"int{bits}, block 32, symmetric")
    q = Quantization(bits, 32, True, 0)
    with torch.no_grad():  # transformers' model on what the quantized one computes with
        for p in model.parameters():
            if p.dim() == 2:  # projections, MLPs, the head and the embedding (64 = 2 blocks)
                p.copy_(torch.from_numpy(dequantize(quantize(p.numpy(), q), q)))
    want = _transformers_tokens(model)
    assert len({t for row in want for t in row}) >= 4, "a degenerate model proves little"
    gen = ["generate", str(out / "llama"), "--max-new", str(NEW), "--json"]
    for p in PROMPTS:
        gen += ["--prompt-ids", ",".join(map(str, p))]
    capsys.readouterr()
    assert main(gen) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == want
    genai_generates(og, out / "llama", want)


def test_quantize_is_refused_where_matmulnbits_cannot_run(tmp_path, capsys) -> None:
    example = str(EXAMPLES[0].parent / "llama_lm.attn")
    for extra, words in ((["--target", "portable"], "standard ops only"),
                         (["--quant-block", "48"], "--quant-block must be one of"),
                         (["--dtype", "bfloat16", "--target", "ort-cuda"], "float32 or float16"),
                         (["--quant-accuracy", "7"], "0 to 4")):
        assert main(["compile", example, "--export", "onnx", "--quantize", "int4",
                     "-o", str(tmp_path), *extra]) == 2
        assert words in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_experts_are_quantized_as_qmoe() -> None:
    """A mixture's experts (run as ONNX Runtime's MoE kernel) are stored in blocks as
    com.microsoft.QMoE: int4 (and int8 symmetric at accuracy_level 4) shrink the file as the
    projections do; int8 asymmetric experts run on their blocks' float values (MoE). Each is
    the oracle on the dequantized weights (test above, and verify here)."""
    layer = attndsl.load(EXAMPLES[0].parent / "mixtral_moe.attn")["mixtral_lm"]
    full = len(layer.onnx_model(target="ort-cpu").bytes())
    for q, op, ratio in ((Quantization(4, 32, True, 0), "QMoE", 0.3),
                         (Quantization(8, 32, True, 4), "QMoE", 0.55),
                         (Quantization(8, 32, False, 0), "MoE", 1.01)):
        data = layer.onnx_model(target="ort-cpu", quantize=q).bytes()
        ops = [n.op_type for n in onnx.load_from_string(data).graph.node]
        assert ops.count(op) == layer.spec.layers and {"MoE", "QMoE"} - {op} - set(ops), ops
        assert len(data) <= ratio * full, len(data) / full
        assert layer.verify(lengths=(1, 9), targets=("ort-cpu",), quantize=q).passed, q.text()
