"""attndsl: attention layers specified once in `.attn` files, compiled to PyTorch and ONNX
Runtime, with equivalence checks against a NumPy reference."""

from __future__ import annotations

__version__ = "0.1.0"

from .api import Layer, Program, load, loads
from .errors import AttnError, ExportError, SpecError, UsageError

__all__ = ["AttnError", "ExportError", "Layer", "Program", "SpecError", "UsageError",
           "__version__", "load", "loads"]
