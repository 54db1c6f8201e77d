"""`compile --export triton`, checked by Triton's own schema: each config.pbtxt parses strictly
as Triton's ModelConfig protobuf (tritonclient's model_config_pb2, a test extra) and declares
every input and output of its 1/model.onnx with the Triton dtype and dims that model has."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import onnx
import pytest
from google.protobuf import text_format

import attndsl
from attndsl.cli import main
from attndsl.triton import config_pbtxt

from .conftest import EXAMPLES


def _model_config_pb2():
    """tritonclient.grpc.model_config_pb2, read from its file: importing it through the package
    runs tritonclient/grpc/__init__.py, which needs the grpc extra (grpcio, and protobuf < 7
    where the pinned onnx stack runs protobuf 7); the module is protoc output needing protobuf
    alone."""
    tritonclient = pytest.importorskip("tritonclient")
    path = Path(tritonclient.__file__).parent / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location("triton_model_config_pb2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pb2 = _model_config_pb2()

# ONNX element type -> Triton data type, as Triton documents them: the Datatypes table of
# docs/user_guide/model_configuration.md (its ONNX Runtime column) and the onnxruntime backend's
# OnnxDataTypeToModelConfigDataType (src/onnxruntime_utils.cc, which adds BFLOAT16 -> TYPE_BF16).
TRITON_TYPES = {"BOOL": "TYPE_BOOL", "UINT8": "TYPE_UINT8", "UINT16": "TYPE_UINT16",
                "UINT32": "TYPE_UINT32", "UINT64": "TYPE_UINT64", "INT8": "TYPE_INT8",
                "INT16": "TYPE_INT16", "INT32": "TYPE_INT32", "INT64": "TYPE_INT64",
                "FLOAT16": "TYPE_FP16", "FLOAT": "TYPE_FP32", "DOUBLE": "TYPE_FP64",
                "STRING": "TYPE_STRING", "BFLOAT16": "TYPE_BF16"}


def _onnx_dims(value: onnx.ValueInfoProto) -> list[int]:
    """The value's shape with -1 for every dynamic axis (a named or unnamed dim)."""
    return [d.dim_value if d.HasField("dim_value") else -1
            for d in value.type.tensor_type.shape.dim]


def _check_tensor(declared, value: onnx.ValueInfoProto, batched: bool) -> None:
    """One config input/output against the ONNX graph's value of that name. Batched
    (max_batch_size > 0): Triton takes the model's first axis as the batch, which must be
    dynamic, and `dims` are the rest; a value that is the batch axis alone is declared
    `dims: [ 1 ]` reshaped to `[ ]` (Triton's model_configuration.md, Reshape)."""
    elem = onnx.TensorProto.DataType.Name(value.type.tensor_type.elem_type)
    assert pb2.DataType.Name(declared.data_type) == TRITON_TYPES[elem], value.name
    dims = _onnx_dims(value)
    if batched:
        assert dims and dims[0] == -1, f"{value.name}: the batch axis must be dynamic"
        dims = dims[1:]
    if dims:
        assert list(declared.dims) == dims, value.name
        assert not declared.HasField("reshape"), value.name
    else:
        assert list(declared.dims) == [1] and list(declared.reshape.shape) == [], value.name


def check_repository(folder: Path, name: str) -> pb2.ModelConfig:
    """The model folder `folder` (config.pbtxt and 1/model.onnx) against Triton's schema and
    the ONNX model it serves; returns the parsed config."""
    assert sorted(p.name for p in folder.iterdir()) == ["1", "config.pbtxt"]
    config = text_format.Parse((folder / "config.pbtxt").read_text(), pb2.ModelConfig())
    graph = onnx.load(str(folder / "1" / "model.onnx"), load_external_data=False).graph
    assert config.name == name == folder.name
    assert config.platform == "onnxruntime_onnx" and config.backend == "onnxruntime"
    assert [k.kind for k in config.instance_group] == [pb2.ModelInstanceGroup.KIND_GPU]
    batched = config.max_batch_size > 0
    assert config.HasField("dynamic_batching") == batched
    for declared, values in ((config.input, graph.input), (config.output, graph.output)):
        assert [d.name for d in declared] == [v.name for v in values]
        for d, v in zip(declared, values, strict=True):
            _check_tensor(d, v, batched)
    if batched:  # one batch axis: every value leads with the same dynamic dim
        firsts = {v.type.tensor_type.shape.dim[0].dim_param
                  for v in [*graph.input, *graph.output]}
        assert len(firsts) == 1 and "" not in firsts, firsts
    return config


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_parses_as_triton_model_config(path: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(path), "--export", "triton", "-q", "-o", str(tmp_path)]) == 0
    capsys.readouterr()
    names = list(attndsl.load(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    for name in names:
        config = check_repository(tmp_path / name, name)
        streams = [i for i in config.input if i.name == "position_ids"]
        if streams:  # [3 or 2, batch, length] (multimodal, axial RoPE): no batch axis first
            assert config.max_batch_size == 0 and list(streams[0].dims) in ([3, -1, -1],
                                                                            [2, -1, -1])
        else:  # every other example's tensors lead with `batch`
            assert config.max_batch_size > 0


DECODING = [("llama_lm", "llama_lm", "float32", []),  # token ids in, logits and caches out
            ("llama_lm", "llama_lm", "float16", []),
            ("llama_lm", "llama_lm", "bfloat16", []),
            ("deepseek_mla", "deepseek_lm", "float32", []),  # compressed key-only caches
            ("t5_relative", "t5_cross", "float32", []),  # memory, key_lengths of [batch]
            ("streaming_llm", "streaming_lm", "float32", ["--bounded-cache"]),
            ("lfm2_hybrid", "lfm2_lm", "float32", []),  # convolution state beside KV caches
            ("qwen3_next_hybrid", "qwen3_next_lm", "float32", [])]


@pytest.mark.parametrize(("stem", "name", "dtype", "extra"), DECODING,
                         ids=[f"{s}:{n}:{d}{''.join(e)}" for s, n, d, e in DECODING])
def test_decoding_model_parses_as_triton_model_config(stem: str, name: str, dtype: str,
                                                      extra: list[str], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`--decode` writes DIR/<layer>_decode, beside the one-pass DIR/<layer>; its caches are
    declared as the model has them (a key or value cache's length dynamic)."""
    for decode in ([], ["--decode", *extra]):
        assert main(["compile", f"examples/{stem}.attn", "--name", name, "--export", "triton",
                     "--dtype", dtype, "-q", "-o", str(tmp_path), *decode]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name, f"{name}_decode"]
    check_repository(tmp_path / name, name)
    config = check_repository(tmp_path / f"{name}_decode", f"{name}_decode")
    declared = {t.name: t for t in [*config.input, *config.output]}
    assert {"attention_mask", "position_ids"} <= set(declared)
    caches = [n for n in declared if n.startswith(("past_key_values.", "present."))]
    assert caches, sorted(declared)
    float_type = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "bfloat16": "TYPE_BF16"}
    for n in caches:
        assert pb2.DataType.Name(declared[n].data_type) == float_type[dtype], n
        if n.endswith((".key", ".value")):  # a recurrent state (lfm2's conv) has fixed dims
            assert -1 in declared[n].dims, n  # the cache's length is dynamic
    assert pb2.DataType.Name(declared["attention_mask"].data_type) == "TYPE_INT64"


def test_a_model_without_a_batch_axis_declares_full_dims() -> None:
    """Triton's rule: max_batch_size > 0 only where every input and output leads with the batch
    axis. A graph whose first axes differ gets max_batch_size 0, full dims, no batcher."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", 8])
    table = helper.make_tensor_value_info("table", TensorProto.INT32, [4, "n"])
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", 8])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [x, table, flag], [y])
    config = text_format.Parse(config_pbtxt("m", helper.make_model(graph)), pb2.ModelConfig())
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    got = {t.name: (pb2.DataType.Name(t.data_type), list(t.dims), list(t.reshape.shape))
           for t in [*config.input, *config.output]}
    assert got == {"x": ("TYPE_FP16", [-1, 8], []), "table": ("TYPE_INT32", [4, -1], []),
                   "flag": ("TYPE_BOOL", [1], []), "y": ("TYPE_FP16", [-1, 8], [])}
    assert config.input[2].HasField("reshape")  # the scalar: one element, reshaped to [ ]


def test_strict_parse_rejects_a_field_triton_does_not_know() -> None:
    """The check above is strict: a field outside Triton's schema fails to parse."""
    with pytest.raises(text_format.ParseError):
        text_format.Parse('name: "m"\nmax_batch: 4\n', pb2.ModelConfig())
