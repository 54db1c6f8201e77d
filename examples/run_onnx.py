"""Run a model exported by attndsl with nothing but onnxruntime and numpy.

    attndsl compile examples/bert_padding.attn --name bert_self --export onnx
    python examples/run_onnx.py exported/bert_self.onnx

Inputs are read from the model: `x` float [B, L, d_model]; `memory` [B, S, memory_dim] for
cross attention; `key_lengths` int64 [B] for padding masks; `segment_ids` int64 [B, L] for
document masks. B, L and S are free: one file serves every length.
"""

import sys

import numpy as np
import onnxruntime as ort


def main(path: str, batch: int = 2, length: int = 50, memory_length: int = 30) -> None:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    names = {i.name for i in session.get_inputs()}
    keys = memory_length if "memory" in names else length
    feed = {}
    for inp in session.get_inputs():
        width = inp.shape[-1]
        if inp.name == "x":
            feed["x"] = rng.standard_normal((batch, length, width)).astype(np.float32)
        elif inp.name == "memory":
            feed["memory"] = rng.standard_normal((batch, memory_length, width)).astype(
                np.float32)
        elif inp.name == "key_lengths":  # the second sequence is padded: only half its keys count
            feed["key_lengths"] = np.array([keys] + [keys // 2] * (batch - 1), dtype=np.int64)
        elif inp.name == "segment_ids":  # two packed documents per row
            feed["segment_ids"] = np.repeat([[0, 1]], batch, axis=0).repeat(
                [length // 2, length - length // 2], axis=1).astype(np.int64)
    (y,) = session.run(["y"], feed)
    meta = session.get_modelmeta().custom_metadata_map
    print(f"{path}: layer {meta.get('attndsl.layer')} (target {meta.get('attndsl.target')})")
    for name, value in feed.items():
        print(f"  input  {name:12s} {value.dtype} {list(value.shape)}")
    print(f"  output y            {y.dtype} {list(y.shape)}, mean {y.mean():+.4f}, "
          f"finite: {bool(np.isfinite(y).all())}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/run_onnx.py MODEL.onnx")
    main(sys.argv[1])
