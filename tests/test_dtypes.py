"""float16 and bfloat16 models: every example against the float64 reference (tolerance 2e-2),
the dtype of everything a model stores and exchanges, the CUDA provider's kernel types, and
bfloat16 graphs, which ONNX Runtime's CPU provider cannot run, checked numerically by running
the same graph retyped to float16."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import attndsl
from attndsl.backends import reference, runtime
from attndsl.bench import attention_kernels
from attndsl.cli import main
from attndsl.dtypes import round_to
from attndsl.errors import UsageError
from attndsl.ir import parameter_count
from attndsl.mechanisms.lsh import LshKernel
from attndsl.spec import attentions_of
from attndsl.targets import lacks_bfloat16_cuda_kernel
from attndsl.verify import make_inputs, tolerance

from .conftest import EXAMPLES, plan_cover, verified

pytestmark = pytest.mark.usefixtures("shared_exports")  # each export built once (conftest)

LAYERS = [(path, name) for path in EXAMPLES for name in attndsl.load(path)]
IDS = [f"{p.stem}:{n}" for p, n in LAYERS]
# A mixture of experts' top-k choice is discontinuous: in half precision a token whose k-th
# and next expert score within the rounding may route otherwise than the float64 reference
# (as transformers' own half-precision routers do), an O(1) difference no tolerance covers;
# a mixture of attention heads' and a shortcut mixture's likewise.
# Its half-precision arithmetic is checked below where the choice cannot differ (top_k =
# experts); its routing exactly in float32 (test_equivalence, the random specs).
HALF = [(p, n) for p, n in LAYERS
        if getattr(attndsl.load(p)[n].spec, "feed_forward", None) is None
        and getattr(attndsl.load(p)[n].spec, "shortcut_form", None) is None  # (a shortcut's)
        and not any(a.projection.__class__.__name__ == "HeadExperts"  # (routed heads alike:
                    for a in attentions_of(attndsl.load(p)[n].spec))]  # test_moa's)
# the numeric sweeps in float16 and bfloat16 take one layer per distinct plan (every layer runs
# in float32 through every backend in test_equivalence)
FLOAT16 = plan_cover(HALF, ("ort-cpu", "ort-cuda"), "float16")
# Gemma 4's unscaled scores (`scale = 1` over q and k RMS-normed per head, so each score is up to
# head_dim): in bfloat16 each carries head_dim times the rounding of q and k (2^-8), past the
# 2e-2 tolerance at some shapes in every backend alike (BENCHMARKS.md, Issue 41's examples on
# CUDA); its float16 and float32 sweeps check it
BFLOAT16 = [(p, n) for p, n in HALF
            if not any(a.scale == 1.0 and a.mechanism("qk_norm") is not None
                       for a in attentions_of(attndsl.load(p)[n].spec))
            # CLIP's vision tower: 12 blocks and no final norm, so its output is the residual
            # stream as it grew, each add rounded to bfloat16 (2^-8): 2.9e-2 of its largest
            # value at 8 x 8 patches in every backend; its float16 and float32 sweeps check it
            and getattr(attndsl.load(p)[n].spec, "final_norm", True)]
BFLOAT16_TORCH = plan_cover(BFLOAT16, ("portable",), "bfloat16")
BFLOAT16_GRAPH = plan_cover(BFLOAT16, ("ort-cuda",), "bfloat16")


def _ids(layers: list) -> list[str]:
    return [f"{p.stem}:{n}" for p, n in layers]
LENGTHS = (1, 7, 64, 300)


def test_the_dtype_sweeps_take_every_strategy_and_mask_primitive() -> None:
    """The one-layer-per-plan sweeps still run every strategy the examples plan and every mask
    primitive they use (read here from the planner's choices and the specs, not from the
    cover's own features)."""
    from attndsl.ir import build
    from attndsl.mechanisms import FFNS
    from attndsl.planner import plan

    # the attentions' (a feed-forward form's node is planned by its module, named after it:
    # mixtures of experts below)
    ffn_plans = ("experts_", *(f"{name}_" for name in FFNS))

    def strategies(layers, target, dtype):
        return {c.strategy for p, n in layers
                for c in plan(build(attndsl.load(p)[n].spec), target, dtype)[1]
                if not c.strategy.startswith(ffn_plans)}

    def primitives(layers):
        def walk(m):
            yield type(m).__name__
            for child in m.children():
                yield from walk(child)
        return {kind for p, n in layers for a in attentions_of(attndsl.load(p)[n].spec)
                for kind in walk(a.mask)}

    for layers, target, dtype in ((FLOAT16, "ort-cpu", "float16"),
                                  (FLOAT16, "ort-cuda", "float16"),
                                  (BFLOAT16_GRAPH, "ort-cuda", "bfloat16")):
        assert strategies(layers, target, dtype) == strategies(LAYERS, target, dtype)
    for layers in (FLOAT16, BFLOAT16_TORCH, BFLOAT16_GRAPH):
        assert primitives(layers) == primitives(LAYERS)
    assert len(FLOAT16) < len(LAYERS)


def _lengths(layer) -> tuple[int, ...]:
    """LENGTHS, but for an LSH layer only those within one chunk: beyond, its float16 queries
    hash differently from the float64 reference's wherever two rotated projections tie within
    float16 rounding, a discontinuity no tolerance covers (docs/LANGUAGE.md, Kernels); for a
    layer whose keys an indexer selects, only those up to its top_k (every key kept), the
    top_k choice being such a discontinuity past them; none past a layer's longest
    (`limits.length_limits`: CLIP's 77 learned positions)."""
    from attndsl.limits import length_limits

    chunks = [a.kernel.chunk for a in attentions_of(layer.spec) if isinstance(a.kernel, LshKernel)]
    chunks += [a.mechanism("indexer").top_k for a in attentions_of(layer.spec)
               if a.mechanism("indexer") is not None]
    chunks += [length_limits(layer.spec).get("length", (LENGTHS[-1], ""))[0]]
    return tuple(n for n in LENGTHS if n <= min(chunks))


def _float_types(model: onnx.ModelProto) -> set[int]:
    """Element types of the graph's float inputs, its output and its initializers."""
    g = model.graph
    values = [v.type.tensor_type.elem_type for v in (*g.input, *g.output)]
    return {t for t in values if t != TensorProto.INT64} | {t.data_type for t in g.initializer}


@pytest.mark.parametrize(("path", "name"), FLOAT16, ids=_ids(FLOAT16))
def test_float16_matches_the_reference(path, name) -> None:
    layer = attndsl.load(path)[name]
    comparisons = verified(layer, _lengths(layer), dtype="float16",
                           targets=("ort-cpu", "ort-cuda"), seed=2)
    assert {c.backend for c in comparisons} >= {"torch", "ort-cpu on cpu", "ort-cuda on cpu"}
    for c in comparisons:
        assert math.isnan(c.tolerance) or c.tolerance >= 2e-2
    assert _float_types(onnx.load_from_string(  # the export verify ran
        layer.onnx_bytes(target="ort-cpu", dtype="float16", seed=2))) == {TensorProto.FLOAT16}


@pytest.mark.parametrize(("path", "name"), [
    ("examples/llama_gqa.attn", "llama_attn"), ("examples/t5_relative.attn", "t5_encoder")])
def test_float16_portable_export_matches_the_reference(path, name) -> None:
    layer = attndsl.load(path)[name]
    report = layer.verify(dtype="float16", targets=("portable",), lengths=(1, 7, 300),
                          batches=(2,), seed=3)
    assert report.passed, report.text()
    model = onnx.load_from_string(layer.onnx_bytes(target="portable", dtype="float16"))
    assert {v.type.tensor_type.elem_type for v in model.graph.output} == {TensorProto.FLOAT16}


@pytest.mark.parametrize(("path", "name"), BFLOAT16_TORCH, ids=_ids(BFLOAT16_TORCH))
def test_bfloat16_torch_module_matches_the_reference(path, name) -> None:
    layer = attndsl.load(path)[name]
    verified(layer, _lengths(layer), dtype="bfloat16", targets=(), seed=4)


def _retyped(model: onnx.ModelProto, src: int, dst: int) -> onnx.ModelProto:
    """The same graph with every `src` float type replaced by `dst` (values converted)."""
    np_dst = helper.tensor_dtype_to_np_dtype(dst)

    def convert(t: TensorProto) -> TensorProto:
        if t.data_type != src:
            return t
        return numpy_helper.from_array(numpy_helper.to_array(t).astype(np_dst), t.name)

    def retype(g: onnx.GraphProto) -> None:  # and every subgraph (a by_length If's)
        for v in (*g.input, *g.output, *g.value_info):
            if v.type.tensor_type.elem_type == src:
                v.type.tensor_type.elem_type = dst
        for i, t in enumerate(g.initializer):
            g.initializer[i].CopyFrom(convert(t))
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    attr.t.CopyFrom(convert(attr.t))
                elif attr.type == onnx.AttributeProto.GRAPH:
                    retype(attr.g)
                elif attr.name == "to" and attr.i == src:
                    attr.i = dst

    out = onnx.ModelProto()
    out.CopyFrom(model)
    retype(out.graph)
    return out


@pytest.mark.parametrize(("path", "name"), BFLOAT16_GRAPH, ids=_ids(BFLOAT16_GRAPH))
def test_bfloat16_graph_computes_the_reference(path, name) -> None:
    """The ort-cuda bfloat16 model stores and exchanges bfloat16 only; retyped to float16 (the
    only difference) it runs on the CPU and matches the reference on its own weights."""
    layer = attndsl.load(path)[name]
    model = onnx.load_from_string(layer.onnx_bytes(target="ort-cuda", dtype="bfloat16"))
    assert _float_types(model) == {TensorProto.BFLOAT16}
    as_fp16 = _retyped(model, TensorProto.BFLOAT16, TensorProto.FLOAT16)
    assert TensorProto.BFLOAT16 not in _float_types(as_fp16)
    session = runtime.make_session(as_fp16.SerializeToString(), "cpu")
    weights = {k: v.detach().double().numpy() for k, v in
               layer.to_torch(dtype="bfloat16").state_dict().items()}
    graph = layer.graph()
    rng = np.random.default_rng(5)
    for L in _lengths(layer):
        inputs = make_inputs(layer.spec, 2, L, rng)
        inputs = {k: round_to(v, "bfloat16").astype(np.float32) if v.dtype.kind == "f" else v
                  for k, v in inputs.items()}
        if L > 64 and "learned" in layer.source.text:
            continue
        ref = reference.run(graph, inputs, weights)
        got = runtime.run(session, inputs)
        assert np.abs(got - ref).max() <= tolerance(ref, "float16"), (L, np.abs(got - ref).max())



def _no_bfloat16_on_cuda(ops: set[str]) -> set[str]:
    """The ops of `ops` whose CUDA kernel takes no bfloat16 (ONNX Runtime's kernel table,
    attndsl/placement): a node of these on a bfloat16 value would be placed on the CPU, which
    has none either."""
    return {op for op in ops if lacks_bfloat16_cuda_kernel(op, "bfloat16")}

_NOT_FLOAT = {"Shape", "Less", "Greater", "Equal", "LessOrEqual", "GreaterOrEqual", "Not",
              "And", "Or"}


def _bfloat16_consumers(model: onnx.ModelProto) -> set[str]:
    """Op types with a bfloat16 operand, by forward type propagation (a value is bfloat16
    when it is a bfloat16 input or initializer, a Cast to bfloat16, or the result of a
    float-preserving op with a bfloat16 operand)."""
    bf16 = {v.name for v in model.graph.input
            if v.type.tensor_type.elem_type == TensorProto.BFLOAT16}
    bf16 |= {t.name for t in model.graph.initializer if t.data_type == TensorProto.BFLOAT16}
    ops = set()

    def nodes(g: onnx.GraphProto):  # a subgraph's nodes after the node that holds it
        for node in g.node:
            yield node
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    yield from nodes(a.g)

    for node in nodes(model.graph):
        takes = any(i in bf16 for i in node.input)
        if takes:
            ops.add(node.op_type)
        if node.op_type == "Cast":
            makes = any(a.name == "to" and a.i == TensorProto.BFLOAT16 for a in node.attribute)
        elif node.op_type == "ConstantOfShape" or node.op_type == "Constant":
            makes = any(a.t.data_type == TensorProto.BFLOAT16 for a in node.attribute
                        if a.type == onnx.AttributeProto.TENSOR)
        else:
            makes = takes and node.op_type not in _NOT_FLOAT
        if makes:
            bf16.update(node.output)
    return ops


@pytest.mark.parametrize(("path", "name"), LAYERS, ids=IDS)
def test_cuda_models_use_only_ops_with_cuda_kernels_for_their_type(path, name) -> None:
    layer = attndsl.load(path)[name]
    bf16 = onnx.load_from_string(layer.onnx_bytes(target="ort-cuda", dtype="bfloat16"))
    assert not _no_bfloat16_on_cuda(_bfloat16_consumers(bf16))
    fp32 = onnx.load_from_string(layer.onnx_bytes(target="ort-cuda"))
    assert "GroupQueryAttention" not in {n.op_type for n in fp32.graph.node}


@pytest.mark.parametrize(("path", "name"), [
    ("examples/bert_padding.attn", "tiny_bert"), ("examples/llama_gqa.attn", "llama_decoder")])
def test_portable_bfloat16_uses_only_ops_with_cuda_kernels(path, name) -> None:
    """torch.onnx.export of the bfloat16 module (gelu and RMS statistics in float32)."""
    layer = attndsl.load(path)[name]
    model = onnx.load_from_string(layer.onnx_bytes(target="portable", dtype="bfloat16"))
    g = model.graph
    assert {v.type.tensor_type.elem_type for v in (*g.input, *g.output)} - {
        TensorProto.INT64} == {TensorProto.BFLOAT16}
    weights = parameter_count(layer.spec)
    assert sum(int(np.prod(t.dims)) for t in g.initializer
               if t.data_type == TensorProto.BFLOAT16) == weights
    assert not _no_bfloat16_on_cuda(_bfloat16_consumers(model))


def test_the_propagation_sees_a_bfloat16_where() -> None:
    """The check above can fail: a Where on a bfloat16 value is found."""
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16),
             helper.make_node("Greater", ["h", "h"], ["c"]),
             helper.make_node("Where", ["c", "h", "h"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2])],
                          [helper.make_tensor_value_info("y", 16, [2])])
    assert _bfloat16_consumers(helper.make_model(g)) == {"Greater", "Where"}


def test_bfloat16_inputs_and_outputs_bind_on_the_cpu() -> None:
    """I/O binding carries bfloat16 both ways (NumPy feeds cannot): y = 2x through float32."""
    nodes = [helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["f", "f"], ["g"]),
             helper.make_node("Cast", ["g"], ["y"], to=TensorProto.BFLOAT16)]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", 16, ["batch", "length", 3])],
                          [helper.make_tensor_value_info("y", 16, ["batch", "length", 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    session = runtime.make_session(model.SerializeToString(), "cpu")
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    y = runtime.run(session, {"x": x})
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, 2 * x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_bfloat16_is_refused_where_the_cpu_would_run_it(tmp_path, capsys) -> None:
    layer = attndsl.load("examples/llama_gqa.attn")["llama_attn"]
    with pytest.raises(UsageError, match="ort-cpu target cannot run bfloat16"):
        layer.onnx_bytes(dtype="bfloat16")
    with pytest.raises(UsageError, match="--providers cuda"):
        layer.verify(dtype="bfloat16", targets=("ort-cuda",))
    out = tmp_path / "never"
    assert main(["compile", "examples/llama_gqa.attn", "--export", "onnx", "--dtype",
                 "bfloat16", "-o", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert "error: the ort-cpu target cannot run bfloat16" in err
    assert "= help: use --target ort-cuda" in err
    assert "Traceback" not in err


@pytest.mark.fresh_exports
def test_compile_float16_is_reproducible_and_records_its_dtype(tmp_path, capsys) -> None:
    args = ["compile", "examples/mistral_local.attn", "--export", "onnx", "--dtype", "float16"]
    assert main([*args, "-o", str(tmp_path / "a")]) == 0
    assert main([*args, "-o", str(tmp_path / "b")]) == 0
    a = (tmp_path / "a" / "mistral_local.onnx").read_bytes()
    assert a == (tmp_path / "b" / "mistral_local.onnx").read_bytes()
    model = onnx.load_from_string(a)
    assert {p.key: p.value for p in model.metadata_props}["attndsl.dtype"] == "float16"
    assert main(["run", str(tmp_path / "a" / "mistral_local.onnx"), "--length", "5"]) == 0
    out = capsys.readouterr().out
    d = attndsl.load("examples/mistral_local.attn")["mistral_local"].spec.d_model
    assert f"input    x            float16  [1, 5, {d}]" in out
    assert f"output   y            float16  [1, 5, {d}]" in out


def test_explain_and_bench_take_the_dtype(capsys) -> None:
    assert main(["explain", "examples/mistral_local.attn", "--target", "ort-cuda"]) == 0
    fp32 = capsys.readouterr().out
    assert main(["explain", "examples/mistral_local.attn", "--target", "ort-cuda", "--dtype",
                 "float16"]) == 0
    fp16 = capsys.readouterr().out
    assert "plan for target ort-cuda:\n  attention: block_sparse" in fp32
    assert "plan for target ort-cuda (float16):\n  attention: gqa" in fp16
    assert main(["bench", "examples/mistral_local.attn", "--lengths", "33", "--repeat", "5",
                 "--targets", "ort-cpu", "--dtype", "float16", "--json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    assert {r["dtype"] for r in rows} == {"float16"}
    if "CUDAExecutionProvider" not in runtime.available():
        assert main(["bench", "examples/mistral_local.attn", "--providers", "cuda"]) == 3
        assert "provider `cuda` is not available" in capsys.readouterr().err
    assert {r["backend"] for r in rows} >= {"torch eager", "ort-cpu on cpu"}
    assert all(r["latency_ms"] and r["latency_ms"] > 0 for r in rows)


def test_torch_modules_hold_the_rounded_float32_weights() -> None:
    layer = attndsl.load("examples/llama_gqa.attn")["llama_attn"]
    fp32 = layer.to_torch(seed=7).state_dict()
    for dtype, torch_dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        half = layer.to_torch(seed=7, dtype=dtype).state_dict()
        for name, value in half.items():
            assert value.dtype == torch_dtype
            assert torch.equal(value, fp32[name].to(torch_dtype))


def test_attention_kernel_lines_are_summarised() -> None:
    """The two formats ORT has printed with ORT_ENABLE_ATTENTION_KERNEL_DEBUG_INFO=1."""
    log = ("\x1b[36mOperator=GroupQueryAttention Node=n12_GroupQueryAttention DataType=fp16 "
           "SdpaKernel=FLASH_ATTENTION\x1b[0m\n"
           "Operator=GroupQueryAttention Node=n40_GroupQueryAttention DataType=fp16 "
           "SdpaKernel=FLASH_ATTENTION\n"
           "AttentionKernelOptions: FLASH_ATTENTION=1 EFFICIENT_ATTENTION=1 MATH=1\n"
           "Operator=MultiHeadAttention Node=n9 DataType=fp32 EFFICIENT_ATTENTION=1\n")
    assert attention_kernels(log) == ("GroupQueryAttention fp16 FLASH_ATTENTION; "
                                      "MultiHeadAttention fp32 EFFICIENT_ATTENTION")
    assert attention_kernels("nothing here\n") == ""


def test_placements_are_read_from_the_profile() -> None:
    """Where each node ran, from ORT's profile: the check that refuses a CUDA result whose
    heavy nodes ran on the CPU. Here every node is on the CPU, which a CUDA session refuses."""
    layer = attndsl.load("examples/llama_gqa.attn")["llama_attn"]
    session = runtime.make_session(layer.onnx_bytes(dtype="float16"), "cpu", profile=True)
    runtime.run(session, make_inputs(layer.spec, 1, 9, np.random.default_rng(0)))
    where = runtime.placements(session)
    assert where["GroupQueryAttention"] == {"CPUExecutionProvider"}
    assert {"MatMul", "FusedMatMul"} & set(where)
    assert runtime.off_device(where, "CPUExecutionProvider") == []
    off = runtime.off_device(where, "CUDAExecutionProvider")
    assert "GroupQueryAttention" in off and "Softmax" not in where.keys() - set(off)
    assert "Shape" not in off  # shape arithmetic may run on the CPU


def test_verify_runs_the_cpu_planned_target_on_cuda_only_when_asked() -> None:
    from attndsl.targets import verify_pairs

    assert verify_pairs(None, ("cpu",)) == [("portable", "cpu"), ("ort-cpu", "cpu"),
                                            ("ort-cuda", "cpu")]
    assert verify_pairs(None, ("cpu", "cuda")) == [
        ("portable", "cpu"), ("portable", "cuda"), ("ort-cpu", "cpu"), ("ort-cuda", "cpu"),
        ("ort-cuda", "cuda")]
    assert verify_pairs(("ort-cpu",), ("cuda",)) == [("ort-cpu", "cuda")]
    assert verify_pairs((), ("cpu",)) == []  # torch against the reference only


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_mixture_of_experts_in_half_precision_matches_the_reference(dtype) -> None:
    """Every expert chosen (top_k = experts): the gates, the rows grouped or gathered by expert
    and their float32 sum (ort-cuda's graph; ort-cpu's com.microsoft.MoE in float16), in half
    precision, against the float64 reference."""
    layer = attndsl.loads("""
attention a {
    d_model  = 64
    heads    = 4
    position = rope(theta = 10000)
    mask     = causal
}

transformer t {
    attention = a
    layers    = 2
    ffn       = moe(experts = 3, top_k = 3, expert = swiglu(40), shared = gelu(24),
                    normalize = false, routed_scale = 2.5)
    norm      = rmsnorm(pre, eps = 1e-5)
}
""")["t"]
    targets = ("ort-cpu", "ort-cuda") if dtype == "float16" else ()  # bfloat16: torch here
    report = layer.verify(dtype=dtype, targets=targets, lengths=(1, 2, 9), batches=(1, 2),
                          seed=4)
    assert report.passed, report.text()
