"""The placement check (attndsl/placement, docs/PLACEMENT.md): hand-built graphs that ONNX
Runtime would run elsewhere or reject, caught and named; the CPU rules' premise run in ONNX
Runtime itself; the CUDA facts a GPU measured held by the tables; every planned export, of
every example and of families' imports, with nothing to report; `check-placement`."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import attndsl
from attndsl.cli import main
from attndsl.placement import check, table
from attndsl.placement.tables import PROVIDERS, _shipped
from attndsl.placement.tables import measured as shipped_measurement
from attndsl.quantize import Quantization

from .conftest import DEEP, EXAMPLES

pytestmark = pytest.mark.usefixtures("shared_exports")


def _model(nodes, inputs, outputs, opset: int = 23, ir: int = 10) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "g", inputs, outputs)
    return h.make_model(graph, ir_version=ir, opset_imports=[
        h.make_opsetid("", opset), h.make_opsetid("com.microsoft", 1)])


def _gqa(dtype: int, head: int = 8, norms: bool = False) -> tuple[onnx.ModelProto, dict]:
    """GroupQueryAttention over 2 query heads and 1 kv head of `head` features, L = 5."""
    B, L, H = 1, 5, 2
    names = ["q", "k", "v", "", "", "seqlens_k", "total"]
    inputs = [h.make_tensor_value_info("q", dtype, [B, L, H * head]),
              h.make_tensor_value_info("k", dtype, [B, L, head]),
              h.make_tensor_value_info("v", dtype, [B, L, head]),
              h.make_tensor_value_info("seqlens_k", T.INT32, [B]),
              h.make_tensor_value_info("total", T.INT32, [])]
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    feeds = {"q": np.ones((B, L, H * head), np_dtype), "k": np.ones((B, L, head), np_dtype),
             "v": np.ones((B, L, head), np_dtype), "seqlens_k": np.array([L - 1], np.int32),
             "total": np.array(L, np.int32)}
    if norms:  # inputs 14 and 15, after cos/sin caches, position ids, bias, sink, kv scales
        names += [""] * 7 + ["qn", "kn"]
        inputs += [h.make_tensor_value_info(n, dtype, [head]) for n in ("qn", "kn")]
        feeds.update(qn=np.ones(head, np_dtype), kn=np.ones(head, np_dtype))
    node = h.make_node("GroupQueryAttention", names, ["y", "pk", "pv"], name="attn",
                       domain="com.microsoft", num_heads=H, kv_num_heads=1)
    return _model([node], inputs, [h.make_tensor_value_info("y", dtype, None)]), feeds


def _why(model: onnx.ModelProto, provider: str) -> list[str]:
    return [f.text() for f in check(model, provider).findings]


def test_float32_group_query_attention_has_no_cuda_kernel() -> None:
    model, _ = _gqa(T.FLOAT)
    (why,) = _why(model, "cuda")
    assert why.startswith("attn (com.microsoft.GroupQueryAttention): CUDAExecutionProvider has "
                          "no kernel for GroupQueryAttention-1 with")
    assert "T = float" in why and "bfloat16|float16" in why
    assert _why(_gqa(T.FLOAT16)[0], "cuda") == []
    assert _why(model, "cpu") == []


def test_bfloat16_topk_has_no_cuda_kernel() -> None:
    node = h.make_node("TopK", ["x", "k"], ["values", "indices"], name="top")
    model = _model([node], [h.make_tensor_value_info("x", T.BFLOAT16, [4, 8]),
                            h.make_tensor_value_info("k", T.INT64, [1])],
                   [h.make_tensor_value_info("values", T.BFLOAT16, None),
                    h.make_tensor_value_info("indices", T.INT64, None)])
    (why,) = _why(model, "cuda")
    assert why.startswith("top (TopK): CUDAExecutionProvider has no kernel for TopK-11 with "
                          "I = int64, T = bfloat16")
    float16 = _model([node], [h.make_tensor_value_info("x", T.FLOAT16, [4, 8]),
                              h.make_tensor_value_info("k", T.INT64, [1])],
                     [h.make_tensor_value_info("values", T.FLOAT16, None),
                      h.make_tensor_value_info("indices", T.INT64, None)])
    assert _why(float16, "cuda") == []


@pytest.mark.parametrize("norms", [True, False])
def test_a_node_that_loads_and_is_rejected_when_it_runs(norms: bool) -> None:
    """CPU GroupQueryAttention with q_norm_weight (and, on both providers, a head size that is
    not a multiple of 8) has a kernel: ONNX Runtime loads it and fails at run time. The rule
    names it, and ONNX Runtime here shows that it does fail."""
    model, feeds = _gqa(T.FLOAT, head=8 if norms else 12, norms=norms)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="q_norm_weight" if norms else "multiple of 8"):
        session.run(None, feeds)
    placement = check(model, "cpu")
    assert [f.rule for f in placement.findings] == [True]
    assert "is rejected when it runs" in placement.findings[0].why
    assert ("q_norm_weight" if norms else "multiple of 8") in placement.findings[0].why
    cuda = check(model, "cuda").findings  # float32: no CUDA kernel at all, whatever the rule
    assert [f.rule for f in cuda] == [False]
    half, _ = _gqa(T.FLOAT16, head=8 if norms else 12, norms=norms)
    assert [f.rule for f in check(half, "cuda").findings] == ([] if norms else [True])


def test_an_open_kernel_covers_its_first_opset_alone() -> None:
    """ONNX Runtime's CUDA Elu kernel is registered for opset 6 with no end: a node of Elu's
    opset-22 schema finds no kernel (measured on a GPU: the provider logs it and runs the
    node on the CPU), one of opset 21's (Elu-6) does."""
    def elu(opset: int) -> onnx.ModelProto:
        return _model([h.make_node("Elu", ["x"], ["y"], name="e")],
                      [h.make_tensor_value_info("x", T.FLOAT, [3])],
                      [h.make_tensor_value_info("y", T.FLOAT, None)], opset=opset)
    (why,) = _why(elu(23), "cuda")
    assert why == ("e (Elu): CUDAExecutionProvider has no kernel for Elu-22 (its kernels cover "
                   "opset 6+)")
    assert _why(elu(21), "cuda") == []


def test_a_node_in_a_subgraph_is_checked_with_the_outer_types() -> None:
    """The branches read the outer graph's x; the then branch's TopK takes its bfloat16 Cast."""
    then = h.make_graph([h.make_node("Cast", ["x"], ["b"], to=T.BFLOAT16),
                         h.make_node("TopK", ["b", "k"], ["v", "i"], name="inner")], "then", [],
                        [h.make_tensor_value_info("v", T.BFLOAT16, None)])
    other = h.make_graph([h.make_node("Cast", ["x"], ["w"], to=T.BFLOAT16)], "else", [],
                         [h.make_tensor_value_info("w", T.BFLOAT16, None)])
    node = h.make_node("If", ["c"], ["y"], name="choose", then_branch=then, else_branch=other)
    model = _model([node], [h.make_tensor_value_info("c", T.BOOL, []),
                            h.make_tensor_value_info("x", T.FLOAT, [4]),
                            h.make_tensor_value_info("k", T.INT64, [1])],
                   [h.make_tensor_value_info("y", T.BFLOAT16, None)])
    (found,) = check(model, "cuda").findings
    assert found.node == "inner (TopK)" and found.path == "graph/choose.then_branch"


def test_float16_on_the_cpu_runs_between_inserted_casts() -> None:
    """The CPU provider's Mul has no float16 kernel; ONNX Runtime inserts Casts to float32
    around it (and runs it): not a finding. On CUDA the bfloat16 Less has no kernel."""
    model = _model([h.make_node("Mul", ["x", "x"], ["y"])],
                   [h.make_tensor_value_info("x", T.FLOAT16, [3])],
                   [h.make_tensor_value_info("y", T.FLOAT16, None)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": np.full(3, 2, np.float16)})[0].tolist() == [4, 4, 4]
    assert _why(model, "cpu") == [] and _why(model, "cuda") == []


def test_the_cuda_facts_a_gpu_measured_are_in_the_tables() -> None:
    """attndsl/placement/cuda-measured.json: the kernels onnxruntime-gpu 1.31.1's CUDA
    provider took that the generated table lacks are covered, and the keys it found no kernel
    for are named by the check, each as a one-node graph."""
    path = table("cuda")
    measured = shipped_measurement("cuda")
    assert measured["missing"], "the measurement names the nodes that had no kernel"
    markdown = _shipped("cuda", with_measured=False)
    for domain, op, since, types in measured["missing"]:
        kernels = path.of(domain, op)
        assert not any(k.covers(since) and all(t in k.types.get(c, {t}) for c, t in types.items())
                       for k in kernels), (op, since, types)
    for domain, op, since, _until, types in measured["kernels"]:
        # what the run added: a version the generated table has no kernel for
        assert not any(k.covers(since) for k in markdown.of(domain, op)), (op, since)
        takes = [k for k in path.of(domain, op) if k.covers(since)]
        assert takes and all(t[7:-1] in takes[0].types[c] for c, ts in types.items()
                             for t in ts), (op, since)


# -- every planned export -----------------------------------------------------------------

LAYERS = [(path, name) for path in EXAMPLES for name in attndsl.load(path)]
_CUDA = [("float16", None), ("bfloat16", None), ("float32", None), ("float16", "int4"),
         ("float16", "int8")]


@pytest.mark.parametrize(("path", "name"), LAYERS, ids=[f"{p.stem}:{n}" for p, n in LAYERS])
def test_every_example_has_a_kernel_for_every_node_on_its_provider(path, name) -> None:
    """ort-cuda in float16, bfloat16 and float32 (and int4, int8), ort-cpu in float32 and
    float16, and the decoding forms: compile refuses a model the check finds anything in, so
    this holds the check's verdict on the model compile wrote."""
    layer = attndsl.load(path)[name]
    runs = [("ort-cuda", dtype, bits) for dtype, bits in _CUDA] + [
        ("ort-cpu", "float32", None), ("ort-cpu", "float16", None), ("ort-cpu", "float32", "int4")]
    for target, dtype, bits in runs:
        quantize = Quantization(int(bits[3:]), accuracy=0) if bits else None
        model = layer.onnx_model(target=target, dtype=dtype, quantize=quantize).proto()
        provider = "cuda" if target == "ort-cuda" else "cpu"
        assert not check(model, provider).findings, (target, dtype, bits)


# families imported from checkpoints (tiny configs of transformers' classes): a sample of the
# mechanisms by default, every type the coverage table says attndsl imports with --deep
_FAMILY_SAMPLE = ("llama", "qwen3_next", "deepseek_v3", "gpt_oss", "lfm2", "gemma3_text",
                  "lfm3", "apertus", "bloom", "phimoe")


def _exact_types() -> list[str]:
    import sys

    from .conftest import ROOT
    sys.path.insert(0, str(ROOT / "tools"))
    from coverage import read_table

    table = read_table(ROOT / "docs" / "CHECKPOINTS.md")
    return [t for t, row in table.items() if row["status"] == "exact"]


@pytest.mark.parametrize("model_type", _exact_types() if DEEP[0] else _FAMILY_SAMPLE)
def test_families_imports_have_a_cuda_kernel_for_every_node(model_type, tmp_path) -> None:
    import sys

    from attndsl.hf_import import import_config

    from .conftest import ROOT
    sys.path.insert(0, str(ROOT / "tools"))
    from coverage_configs import tiny_config

    tiny_config(model_type).save_pretrained(tmp_path)
    program = attndsl.loads(import_config(tmp_path, "right", "auto"), "family.attn")
    top = program[list(program.resolved.layers)[-1]]
    for dtype, bits in (*_CUDA, ("float32", "int8")):
        quantize = Quantization(int(bits[3:]), accuracy=0) if bits else None
        model = top.onnx_model(target="ort-cuda", dtype=dtype, quantize=quantize).proto()
        assert not check(model, "cuda").findings, (dtype, bits)
    if getattr(top.spec, "vocab", None) is not None:
        decoder = top.decoder_model(target="ort-cuda", dtype="float16").proto()
        assert not check(decoder, "cuda").findings


def test_check_placement_names_what_a_provider_lacks(tmp_path, capsys) -> None:
    """`attndsl check-placement`: exit 0 when every node has a kernel, 1 with the nodes that
    do not, 2 for a file that is not an ONNX model; --json for tools."""
    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(_gqa(T.FLOAT16)[0], good)
    onnx.save(_gqa(T.FLOAT)[0], bad)
    assert main(["check-placement", str(good), "--provider", "cuda"]) == 0
    assert "every one of the 1 nodes has a kernel" in capsys.readouterr().out
    assert main(["check-placement", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}: placement on {PROVIDERS['cuda']}" in out and "attn (com.microsoft." in out
    assert main(["check-placement", str(bad), "--provider", "cpu", "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["findings"] == [] and report["nodes"] == 1
    (tmp_path / "not.onnx").write_text("hello")
    assert main(["check-placement", str(tmp_path / "not.onnx")]) == 2
    assert "not an ONNX model" in capsys.readouterr().err


def test_sibling_branches_keep_their_own_types() -> None:
    """Both branches of an If name a value `t`: int8 in one, float in the other. Each node is
    checked with its own branch's type (ONNX Runtime's CUDA Relu takes no int8)."""
    def branch(name: str, elem: int) -> onnx.GraphProto:
        return h.make_graph([h.make_node("Cast", ["x"], ["t"], to=elem),
                             h.make_node("Relu", ["t"], ["r"], name=name),
                             h.make_node("Cast", ["r"], ["out"], to=T.FLOAT)], name, [],
                            [h.make_tensor_value_info("out", T.FLOAT, None)])
    node = h.make_node("If", ["c"], ["y"], name="br", then_branch=branch("relu_i8", T.INT8),
                       else_branch=branch("relu_f", T.FLOAT))
    model = _model([node], [h.make_tensor_value_info("c", T.BOOL, []),
                            h.make_tensor_value_info("x", T.FLOAT, [4])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)])
    assert [f.node for f in check(model, "cuda").findings] == ["relu_i8 (Relu)"]


def test_a_node_computed_from_initializers_alone_is_folded_not_placed() -> None:
    """ONNX Runtime folds a node whose inputs are all initializers when it loads the model:
    its Elu-22 needs no CUDA kernel; the same node on a graph input does."""
    weight = onnx.numpy_helper.from_array(np.ones(3, np.float32), "w")
    nodes = [h.make_node("Elu", ["w"], ["e"], name="folded"),
             h.make_node("Elu", ["x"], ["f"], name="placed"),
             h.make_node("Add", ["e", "f"], ["y"], name="add")]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [3])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)])
    model.graph.initializer.append(weight)
    assert [f.node for f in check(model, "cuda").findings] == ["placed (Elu)"]


def test_check_placement_on_what_onnx_runtime_does_not_load(tmp_path, capsys) -> None:
    """A file without a graph or an opset import: exit 2, the other files still checked; an
    opset newer than ONNX Runtime knows: a finding; an element type onnx does not know: no
    crash, the value untyped."""
    empty, bare, late, odd = (tmp_path / f"{n}.onnx" for n in ("empty", "bare", "late", "odd"))
    empty.write_bytes(b"")
    model = _model([h.make_node("Relu", ["x"], ["y"])],
                   [h.make_tensor_value_info("x", T.FLOAT, [3])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)])
    del model.opset_import[:]
    onnx.save(model, bare)
    onnx.save(_model([h.make_node("Relu", ["x"], ["y"])],
                     [h.make_tensor_value_info("x", T.FLOAT, [3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], opset=99), late)
    unknown = _model([h.make_node("Relu", ["x"], ["y"])],
                     [h.make_tensor_value_info("x", T.FLOAT, [3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    unknown.graph.input[0].type.tensor_type.elem_type = 99
    odd.write_bytes(unknown.SerializeToString())
    assert main(["check-placement", str(empty), str(bare), str(late), str(odd)]) == 2
    captured = capsys.readouterr()
    assert "empty.onnx: not an ONNX model ONNX Runtime loads (it has no graph)" in captured.err
    assert "bare.onnx: not an ONNX model ONNX Runtime loads (it has no opset import)" in \
        captured.err
    assert "it imports opset 99 of the standard domain" in captured.out
    assert f"{odd}: placement on" in captured.out and "internal error" not in captured.err
