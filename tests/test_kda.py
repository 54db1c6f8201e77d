"""Kimi delta attention (docs/LANGUAGE.md, Kernels: `kda`) against transformers'
KimiLinearDeltaAttention (low-rank gates, the softplus forget gate) and
BailingHybridDeltaAttention (full gates, the bounded forget gate), built from their config
classes (nothing downloads): the torch module and both ONNX targets at lengths that are not
multiples of the chunk, one token and several chunks; the chunked form against the oracle's
token-by-token recurrence, with rows of left padding; the random specs that draw it, in one
pass and decoding; and its diagnostics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import attndsl

from .test_delta_rule import agree
from .test_transformers import close, redraw

D_MODEL, HEADS, HEAD_DIM, CONV = 40, 3, 8, 4


def _kimi(seed: int):
    from transformers import KimiLinearConfig
    from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention

    config = KimiLinearConfig(hidden_size=D_MODEL, num_hidden_layers=1, rms_norm_eps=1e-5,
                              linear_attn_config={"head_dim": HEAD_DIM, "num_heads": HEADS,
                                                  "short_conv_kernel_size": CONV})
    net = KimiLinearDeltaAttention(config, layer_idx=0).eval()
    redraw(net, seed)
    with torch.no_grad():  # decays of every strength
        net.forget_gate.A_log.copy_(torch.linspace(-3.0, 1.5, HEADS).view(1, 1, HEADS, 1))
    return net


def _bailing(seed: int, safe: bool):
    from transformers import BailingHybridConfig
    from transformers.models.bailing_hybrid.modeling_bailing_hybrid import (
        BailingHybridDeltaAttention,
    )

    config = BailingHybridConfig(hidden_size=D_MODEL, num_hidden_layers=1, head_dim=HEAD_DIM,
                                 num_attention_heads=HEADS, short_conv_kernel_size=CONV,
                                 kda_safe_gate=safe, kda_lower_bound=-5.0, rms_norm_eps=1e-6)
    net = BailingHybridDeltaAttention(config, layer_idx=0).eval()
    redraw(net, seed)
    with torch.no_grad():
        net.forget_gate.A_log.copy_(torch.linspace(-3.0, 1.5, HEADS))
    return net


def renamed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The layer's tensors under attndsl's names: the forget gate's own out of
    `forget_gate.`, A_log one value per head, o_norm attndsl's `norm`."""
    out = {}
    for key, value in state.items():
        key = key.removeprefix("forget_gate.").replace("o_norm.", "norm.")
        out[key] = (value.reshape(-1) if key == "A_log" else value).contiguous()
    return out


SPEC = f"""
attention kda {{{{
    d_model  = {D_MODEL}
    heads    = {HEADS}
    head_dim = {HEAD_DIM}
    bias     = false
    kernel   = kda(conv = {CONV}, chunk = {{chunk}}, eps = {{eps}}{{gates}})
    mask     = causal
}}}}
"""
KIMI = ", forget_rank = 8, gate_rank = 8"


@pytest.mark.parametrize("chunk", [8, 64])
def test_kda_matches_kimi_linear_delta_attention(tmp_path, chunk: int) -> None:
    net = _kimi(5)
    weights = tmp_path / "w.safetensors"
    save_file(renamed(net.state_dict()), str(weights))
    layer = attndsl.loads(SPEC.format(chunk=chunk, eps="1e-5", gates=KIMI))["kda"]
    models = [layer.onnx_bytes(target=t, weights=weights) for t in ("ort-cpu", "portable")]
    agree(net, layer.to_torch(weights=weights), models, (1, 5, 40, 131), D_MODEL)


@pytest.mark.parametrize("safe", [True, False], ids=["lower_bound", "softplus"])
def test_kda_matches_bailing_hybrid_delta_attention(tmp_path, safe: bool) -> None:
    net = _bailing(9, safe)
    weights = tmp_path / "w.safetensors"
    save_file(renamed(net.state_dict()), str(weights))
    gates = ", lower_bound = -5" if safe else ""
    layer = attndsl.loads(SPEC.format(chunk=16, eps="1e-6", gates=gates))["kda"]
    models = [layer.onnx_bytes(target="ort-cpu", weights=weights)]
    agree(net, layer.to_torch(weights=weights), models, (1, 17, 50), D_MODEL)


def test_the_chunked_form_is_the_recurrence_with_left_padding() -> None:
    """Chunks of 1 (the recurrence itself), 3 and 16 give the oracle's token-by-token
    recurrence around each chunk's multiples, rows of left padding included (a padded slot
    leaves the state as it is, so a row's outputs are those of its real tokens alone)."""
    from attndsl.backends import reference
    from attndsl.ir import build

    for chunk in (1, 3, 16):
        text = SPEC.format(chunk=chunk, eps="1e-6", gates=KIMI + ", lower_bound = -2")
        layer = attndsl.loads(text.replace("causal", "causal & padding(side = left)"))["kda"]
        module = layer.to_torch(seed=3)
        weights = {k: v.detach().double().numpy() for k, v in module.state_dict().items()}
        model = layer.onnx_bytes(target="ort-cpu", seed=3)
        import onnxruntime as ort

        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        for L in sorted({1, chunk, chunk + 1, 2 * chunk + 1, 37}):
            rng = np.random.default_rng(L)
            x = rng.standard_normal((3, L, D_MODEL)).astype(np.float32)
            lengths = np.array([L, max(L - 2, 0), 0], np.int64)
            feed = {"x": x, "key_lengths": lengths}
            want = reference.run(build(layer.spec), feed, weights)
            with torch.no_grad():
                got = module(**{k: torch.from_numpy(v) for k, v in feed.items()}).numpy()
            for ours in (got, session.run(None, feed)[0]):
                for row, n in enumerate(lengths):  # a real token's output is meaningful
                    if n:
                        close(ours[row, L - n:], want[row, L - n:])


def test_random_kda_specs_match_the_reference_and_decode_as_one_pass() -> None:
    """Kimi delta attention drawn from its own stream: a low-rank forget gate (13), a stack
    of two layers (118), left padding with full gates and the softplus gate (261), left
    padding with the bounded gate (508); 178 decoding as one pass."""
    from .test_random_specs import check_stream

    check_stream(((13, ("kda(", "forget_rank = 3")), (118, ("kda(", "transformer")),
                  (261, ("kda(", "padding", "forget_rank = none", "lower_bound = none")),
                  (508, ("kda(", "padding", "lower_bound = -"))),
                 portable=13, decoding=(178, "kda("))


@pytest.mark.parametrize(("entries", "words"), [
    ("kernel = kda(lower_bound = 0.5)", "below 0"),
    ("kv_heads = 1\n    kernel = kda()", "as many query and key heads as value heads"),
    ("kernel = kda()\n    position = rope", "no positions"),
    ("kernel = kda(forget_rank = 0)", "forget_rank"),
])
def test_kda_diagnostics(entries: str, words: str) -> None:
    text = (f"attention a {{\n    d_model = 16\n    heads = 2\n    {entries}\n"
            "    mask = causal\n}\n")
    with pytest.raises(attndsl.SpecError) as caught:
        attndsl.loads(text, "kda.attn")
    assert words in str(caught.value), str(caught.value)


def test_ort_targets_run_linear_attention_and_portable_the_chunked_form() -> None:
    """The recurrence of a KDA and a delta-rule layer is ONNX Runtime's LinearAttention on
    ort-cpu and ort-cuda (one pass and decoding; the CUDA kernel measured on an H100,
    attndsl/placement/cuda-measured.json), the chunked Scan on portable; `explain`'s plan
    names the form."""
    import onnx

    kda = attndsl.loads(SPEC.format(chunk=16, eps="1e-6", gates=KIMI))["kda"]
    delta = attndsl.loads(SPEC.replace(", eps = {eps}{gates}", "").replace(
        "kda(", "delta_rule(").format(chunk=16))["kda"]
    for layer in (kda, delta):
        for target, op in (("ort-cpu", "LinearAttention"), ("ort-cuda", "LinearAttention"),
                           ("portable", "Scan")):
            for model in (layer.onnx_bytes(target=target, seed=0),
                          layer.decoder_bytes(target=target, seed=0)):
                ops = {n.op_type for n in onnx.load_from_string(model).graph.node}
                ops |= {n.op_type for n in onnx.load_from_string(model).graph.node
                        for a in n.attribute if a.g for n in a.g.node}
                assert op in ops and ("Scan" if op == "LinearAttention" else
                                      "LinearAttention") not in ops, (target, ops)
        assert "LinearAttention" in str(layer.plan("ort-cpu")[1][0])
        assert "LinearAttention" in str(layer.plan("ort-cuda")[1][0])
