"""The gated short convolution (docs/LANGUAGE.md, Kernels: `short_conv`) against transformers'
Lfm2ShortConv, built from its config class (nothing downloads): the torch module and every
ONNX target, with and without biases, at one token and longer; ort-cpu's
com.microsoft.CausalConvWithState and the standard ops of the other targets; and the random
specs that draw it, in one pass and decoding, against the oracle."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from safetensors.torch import save_file

import attndsl

from .test_delta_rule import agree
from .test_transformers import close, redraw

D_MODEL = 24


def _short_conv(seed: int, bias: bool, width: int):
    from transformers import Lfm2Config
    from transformers.models.lfm2.modeling_lfm2 import Lfm2ShortConv

    config = Lfm2Config(hidden_size=D_MODEL, conv_bias=bias, conv_L_cache=width,
                        num_hidden_layers=1, layer_types=["conv"])
    net = Lfm2ShortConv(config, layer_idx=0).eval()
    redraw(net, seed)
    return net


def _renamed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Lfm2ShortConv's tensors under attndsl's names (out_proj is attndsl's o_proj)."""
    return {k.replace("out_proj", "o_proj"): v.contiguous() for k, v in state.items()}


SPEC = """
attention conv {{
    d_model = {d}
    heads   = 1
    bias    = {bias}
    kernel  = short_conv(width = {width})
    mask    = causal
}}
"""


@pytest.mark.parametrize(("bias", "width"), [(False, 3), (True, 4)])
def test_short_conv_matches_lfm2_short_conv(tmp_path, bias: bool, width: int) -> None:
    net = _short_conv(5, bias, width)
    weights = tmp_path / "w.safetensors"
    save_file(_renamed(net.state_dict()), str(weights))
    text = SPEC.format(d=D_MODEL, bias="true" if bias else "false", width=width)
    layer = attndsl.loads(text)["conv"]
    module = layer.to_torch(weights=weights)
    models = {t: layer.onnx_bytes(target=t, weights=weights)
              for t in ("ort-cpu", "ort-cuda", "portable")}
    fused = {t: any(n.op_type == "CausalConvWithState" for n in
                    onnx.load_from_string(m).graph.node) for t, m in models.items()}
    assert fused == {"ort-cpu": True, "ort-cuda": False, "portable": False}
    agree(net, module, models.values(), (1, 2, 7, 40), D_MODEL)


def test_float16_ort_cpu_runs_the_float32_kernel_between_casts() -> None:
    """CausalConvWithState has a float32 CPU kernel alone in ONNX Runtime 1.31; a float16
    model uses it, as every float16 node of the CPU provider without a float16 kernel: ONNX
    Runtime inserts Casts to float32 around it (docs/PLACEMENT.md). It matches the float32
    model to float16's rounding."""
    layer = attndsl.loads(SPEC.format(d=D_MODEL, bias="false", width=3))["conv"]
    model = onnx.load_from_string(layer.onnx_bytes(target="ort-cpu", seed=1, dtype="float16"))
    assert any(n.op_type == "CausalConvWithState" for n in model.graph.node)
    x = np.random.default_rng(0).standard_normal((2, 9, D_MODEL)).astype(np.float32)
    import onnxruntime as ort

    def _session(data: bytes):
        return ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    half = _session(layer.onnx_bytes(target="ort-cpu", seed=1, dtype="float16"))
    full = _session(layer.onnx_bytes(target="ort-cpu", seed=1))
    y16 = half.run(None, {"x": x.astype(np.float16)})[0].astype(np.float32)
    y32 = full.run(None, {"x": x})[0]
    assert np.abs(y16 - y32).max() <= 2e-2 * max(1.0, float(np.abs(y32).max()))


def _seeds(decoding: bool, count: int) -> list[int]:
    from .specgen import random_spec

    return [s for s in range(400) if "short_conv" in random_spec(s, decoding)][:count]


@pytest.mark.parametrize("seed", _seeds(False, 4))
def test_random_short_conv_spec_matches_reference_everywhere(seed: int) -> None:
    from .test_random_specs import check_random_spec

    check_random_spec(seed, portable=seed == _seeds(False, 1)[0])  # torch.onnx.export: seconds


@pytest.mark.parametrize("seed", _seeds(True, 3))
def test_random_short_conv_spec_decodes_as_one_pass(seed: int) -> None:
    from attndsl.decoding import check_decodable

    from .specgen import random_spec
    from .test_decoding import _check_decoding

    program = attndsl.loads(random_spec(seed, decoding=True), f"random-{seed}.attn")
    layer = program[list(program)[-1]]
    check_decodable(layer.spec)
    _check_decoding(layer)


def test_the_oracle_reads_padding_slots_as_zero_inputs() -> None:
    """A left-padded row equals the same tokens unpadded: the padding slots' inputs are 0,
    as the convolution's before the first token (the oracle, the torch module, ort-cpu)."""
    from attndsl.backends import reference
    from attndsl.ir import build

    text = SPEC.format(d=D_MODEL, bias="true", width=3).replace(
        "mask    = causal", "mask    = causal & padding(side = left)")
    layer = attndsl.loads(text)["conv"]
    module = layer.to_torch(seed=2)
    weights = {k: v.detach().double().numpy() for k, v in module.state_dict().items()}
    model = layer.onnx_bytes(target="ort-cpu", seed=2)
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((2, 6, D_MODEL)).astype(np.float32)
    x[1, :2] = 1e3  # padding slots: what they hold is never read
    lengths = np.array([6, 4], np.int64)
    alone = reference.run(build(layer.spec), {"x": x[1:, 2:], "key_lengths": lengths[1:] - 0},
                          weights)
    feed = {"x": x, "key_lengths": lengths}
    want = reference.run(build(layer.spec), feed, weights)
    np.testing.assert_allclose(want[1, 2:], alone[0], atol=1e-9)
    with torch.no_grad():
        close(module(*(torch.from_numpy(v) for v in feed.values())).numpy(), want)
    close(session.run(None, feed)[0], want)
