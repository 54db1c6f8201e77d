"""The element types attndsl handles, each named once, and the floating-point types a model can
be compiled for (`--dtype`). Weights, inputs and outputs use the model dtype; softmax (and
every score computation before it), norms' statistics and position tables are computed in
float32 whatever it is.

A type is named as NumPy and torch spell it ("float32", "int64", "bool"); `ONNX_TYPE` gives its
ONNX element type and `from_ort` reads ONNX Runtime's name for it ("tensor(float)"). NumPy has
no bfloat16: arrays of that type are `ml_dtypes.bfloat16` (a dependency of onnx)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["DTYPES", "ONNX_TYPE", "dtype_name", "from_ort", "numpy_dtype", "round_to",
           "torch_dtype"]

DTYPES = ("float32", "float16", "bfloat16")

# name -> (ONNX element type: onnx.TensorProto's number, ONNX Runtime's type name)
_TYPES = {"float32": (1, "tensor(float)"), "float16": (10, "tensor(float16)"),
          "bfloat16": (16, "tensor(bfloat16)"), "float64": (11, "tensor(double)"),
          "int64": (7, "tensor(int64)"), "int32": (6, "tensor(int32)"),
          "bool": (9, "tensor(bool)")}
ONNX_TYPE = {name: element for name, (element, _) in _TYPES.items()}
_FROM_ORT = {ort: name for name, (_, ort) in _TYPES.items()}


def from_ort(type_name: str) -> str | None:
    """The name of ONNX Runtime's `tensor(...)` type, or None for a type attndsl never uses."""
    return _FROM_ORT.get(type_name)


def numpy_dtype(dtype: str) -> Any:
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype).type


def torch_dtype(dtype: str) -> Any:
    import torch

    return getattr(torch, dtype)


def dtype_name(dtype: Any) -> str:
    """The name of a torch dtype (torch.float32 -> "float32")."""
    return str(dtype).removeprefix("torch.")


def round_to(array: np.ndarray, dtype: str) -> np.ndarray:
    """`array` rounded to `dtype` (to nearest, ties to even) and widened back to float64: the
    values a model of that dtype really holds."""
    return np.asarray(array).astype(numpy_dtype(dtype)).astype(np.float64)
