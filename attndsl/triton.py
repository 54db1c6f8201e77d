"""`compile --export triton`: a Triton Inference Server model repository,
`DIR/<name>/config.pbtxt` and `DIR/<name>/1/model.onnx`, written atomically by `output.Outputs`
(a folder is built beside the target, then renamed into place; a good earlier repository
survives a failure).

The config is derived from the ONNX graph itself: every input and output with its name, dtype
and dims (-1 for a dynamic axis), the onnxruntime backend (platform onnxruntime_onnx), and a GPU
instance group using ONNX Runtime's CUDA execution provider. Where every input and output leads
with the same dynamic axis (attndsl's `batch`, in the one-pass and the decoding form alike) it is
Triton's batch dimension: max_batch_size > 0, that axis left out of `dims`, as Triton requires,
and dynamic batching; otherwise max_batch_size 0 and the full dims."""

from __future__ import annotations

import onnx

from .output import Stream

__all__ = ["MAX_BATCH_SIZE", "config_pbtxt", "repository_files"]

MAX_BATCH_SIZE = 64
_TYPES = {onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.FLOAT16: "TYPE_FP16",
          onnx.TensorProto.BFLOAT16: "TYPE_BF16", onnx.TensorProto.INT64: "TYPE_INT64",
          onnx.TensorProto.INT32: "TYPE_INT32", onnx.TensorProto.DOUBLE: "TYPE_FP64",
          onnx.TensorProto.BOOL: "TYPE_BOOL"}


def _batch_axis(model: onnx.ModelProto) -> str | None:
    """The dynamic axis every input and output leads with (Triton's batch dimension), or None."""
    firsts = {v.type.tensor_type.shape.dim[0].dim_param if v.type.tensor_type.shape.dim else ""
              for v in [*model.graph.input, *model.graph.output]}
    return firsts.pop() if len(firsts) == 1 and "" not in firsts else None


def _tensor(value: onnx.ValueInfoProto, batched: bool) -> str:
    t = value.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim][int(batched):]
    lines = ["  {", f'    name: "{value.name}"', f"    data_type: {_TYPES[t.elem_type]}"]
    if dims:
        lines.append(f"    dims: [ {', '.join(map(str, dims))} ]")
    else:  # only the batch axis (or a scalar): Triton wants one element, reshaped away
        lines += ["    dims: [ 1 ]", "    reshape: { shape: [ ] }"]
    return "\n".join([*lines, "  }"])


def config_pbtxt(name: str, model: onnx.ModelProto) -> str:
    batched = _batch_axis(model) is not None
    inputs = ",\n".join(_tensor(v, batched) for v in model.graph.input)
    outputs = ",\n".join(_tensor(v, batched) for v in model.graph.output)
    batching = "dynamic_batching {\n  max_queue_delay_microseconds: 100\n}\n" if batched else ""
    return f"""name: "{name}"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
max_batch_size: {MAX_BATCH_SIZE if batched else 0}
input [
{inputs}
]
output [
{outputs}
]
{batching}instance_group [
  {{
    count: 1
    kind: KIND_GPU
  }}
]
optimization {{
  graph: {{ level: 1 }}
  cuda: {{ graphs: false }}
}}
parameters {{ key: "cudnn_conv_algo_search" value: {{ string_value: "0" }} }}
parameters {{ key: "arena_extend_strategy" value: {{ string_value: "1" }} }}
"""


def repository_files(name: str, model: dict[str, bytes | Stream]) -> dict[str, bytes | Stream]:
    """The files of one model's folder in a repository: config.pbtxt and 1/model.onnx (with
    1/model.onnx.data over 2 GB: `model` is `Exported.streams("model.onnx")`)."""
    one = model["model.onnx"]  # a streamed single file is read whole for its inputs here
    proto = onnx.load_from_string(one if isinstance(one, bytes) else one.bytes())
    return {"config.pbtxt": config_pbtxt(name, proto).encode(),
            **{f"1/{file}": data for file, data in model.items()}}
