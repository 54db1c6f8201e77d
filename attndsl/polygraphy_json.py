"""Inputs and outputs in Polygraphy's JSON format, so that
`polygraphy run model.onnx --onnxrt --load-inputs inputs.json --load-outputs outputs.json`
can check an exported model against attndsl's reference without attndsl.

Format (polygraphy/json/serde.py, polygraphy/comparator/struct.py): an array is
{"array": base64(np.save bytes), "polygraphy_class": "ndarray"}; inputs are a list of feed dicts,
one per iteration; outputs are a RunResults {"lst": [[runner, [IterationResult, ...]], ...]}."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["decode_array", "encode_array", "inputs_json", "run_results_json"]

_MARKER = "polygraphy_class"


def encode_array(array: np.ndarray) -> dict[str, str]:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return {"array": base64.b64encode(buffer.getvalue()).decode(), _MARKER: "ndarray"}


def decode_array(obj: Mapping[str, str]) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(obj["array"])), allow_pickle=False)


def inputs_json(feeds: Sequence[Mapping[str, np.ndarray]]) -> str:
    return json.dumps([{k: encode_array(v) for k, v in feed.items()} for feed in feeds],
                      indent=4)


def run_results_json(runs: Mapping[str, Sequence[Mapping[str, np.ndarray]]]) -> str:
    """runner name -> one output dict per iteration."""
    lst = []
    for runner, iterations in runs.items():
        results = [{"outputs": {name: {"values": encode_array(v), _MARKER: "LazyNumpyArray"}
                                for name, v in outputs.items()},
                    "runtime": None, "runner_name": runner, _MARKER: "IterationResult"}
                   for outputs in iterations]
        lst.append([runner, results])
    return json.dumps({"lst": lst, _MARKER: "RunResults"}, indent=4)
