"""The floating-point types a model can be compiled for (`--dtype`), and conversions between
them. Weights, inputs and outputs use the model dtype; softmax (and every score computation
before it), norms' statistics and position tables are computed in float32 whatever it is.

NumPy has no bfloat16: arrays of that type are `ml_dtypes.bfloat16` (a dependency of onnx)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["DTYPES", "numpy_dtype", "round_to", "torch_dtype"]

DTYPES = ("float32", "float16", "bfloat16")


def numpy_dtype(dtype: str) -> Any:
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype).type


def torch_dtype(dtype: str) -> Any:
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]


def round_to(array: np.ndarray, dtype: str) -> np.ndarray:
    """`array` rounded to `dtype` (to nearest, ties to even) and widened back to float64: the
    values a model of that dtype really holds."""
    return np.asarray(array).astype(numpy_dtype(dtype)).astype(np.float64)
