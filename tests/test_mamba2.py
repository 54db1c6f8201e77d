"""Mamba2's state-space layer (docs/LANGUAGE.md, Kernels: `mamba2`) against transformers'
Mamba2Mixer, built from its config class (nothing downloads): the torch module and both ONNX
targets (LinearAttention on ort-cpu, the chunked Scan on portable) at lengths that are not
multiples of the chunk, one token and several chunks, with B and C in groups; a left-padded
batch against each row alone; the random specs that draw it, in one pass and decoding, against
the oracle; and its diagnostics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import attndsl
from attndsl.weight_table import weight_table

from .test_delta_rule import agree
from .test_transformers import redraw

D_MODEL, HEADS, P, N, GROUPS, CONV = 24, 4, 12, 8, 2, 4
INNER = HEADS * P


def _mixer(time_step_limit=(0.0, float("inf"))):
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    config = Mamba2Config(hidden_size=D_MODEL, num_heads=HEADS, head_dim=P, state_size=N,
                          n_groups=GROUPS, conv_kernel=CONV, expand=INNER // D_MODEL,
                          chunk_size=8, time_step_limit=time_step_limit, num_hidden_layers=1)
    net = Mamba2Mixer(config, layer_idx=0).eval()
    redraw(net, 7)
    with torch.no_grad():  # a decay that matters and a step of a useful size
        net.A_log.copy_(torch.linspace(-1.0, 0.5, HEADS))
        net.dt_bias.copy_(torch.linspace(-1.5, 0.5, HEADS))
    return net


def renamed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Mamba2Mixer's tensors under attndsl's names: in_proj's rows [z | x | B | C | dt] split,
    the convolution's channels [x | B | C] reordered as attndsl's [C | B | x], out_proj its
    o_proj."""
    keys = GROUPS * N
    z, x, b, c, dt = state["in_proj.weight"].split([INNER, INNER, keys, keys, HEADS])
    order = torch.cat([torch.arange(INNER + keys, INNER + 2 * keys),
                       torch.arange(INNER, INNER + keys), torch.arange(INNER)])
    out = {"z_proj.weight": z, "x_proj.weight": x, "B_proj.weight": b, "C_proj.weight": c,
           "dt_proj.weight": dt, "conv1d.weight": state["conv1d.weight"][order],
           "conv1d.bias": state["conv1d.bias"][order], "dt_bias": state["dt_bias"],
           "A_log": state["A_log"], "D": state["D"], "norm.weight": state["norm.weight"],
           "o_proj.weight": state["out_proj.weight"]}
    return {k: v.contiguous() for k, v in out.items()}


def _spec(chunk: int, extra: str = "") -> str:
    return f"""
attention ssm {{
    d_model   = {D_MODEL}
    heads     = {HEADS}
    head_dim  = {N}
    value_dim = {P}
    bias      = false
    kernel    = mamba2(groups = {GROUPS}, conv = {CONV}, chunk = {chunk}{extra})
    mask      = causal
}}
"""


@pytest.mark.parametrize("chunk", [5, 64])
def test_mamba2_matches_mamba2_mixer(tmp_path, chunk: int) -> None:
    net = _mixer()
    weights = tmp_path / "w.safetensors"
    save_file(renamed(net.state_dict()), str(weights))
    layer = attndsl.loads(_spec(chunk))["ssm"]
    models = [layer.onnx_bytes(target=t, weights=weights) for t in ("ort-cpu", "portable")]

    class Net(torch.nn.Module):
        def forward(self, x):
            return net(x)

    agree(Net(), layer.to_torch(weights=weights), models, (1, 5, 17, 131), D_MODEL)


def test_the_step_clamp_is_transformers_one_pass_clamp(tmp_path) -> None:
    """`dt_min` and `dt_max` clamp the step as Mamba2's time_step_limit does over a sequence."""
    net = _mixer((0.3, 0.9))
    weights = tmp_path / "w.safetensors"
    save_file(renamed(net.state_dict()), str(weights))
    layer = attndsl.loads(_spec(8, ", dt_min = 0.3, dt_max = 0.9"))["ssm"]
    models = [layer.onnx_bytes(target=t, weights=weights) for t in ("ort-cpu", "portable")]

    class Net(torch.nn.Module):
        def forward(self, x):
            return net(x)

    agree(Net(), layer.to_torch(weights=weights), models, (3, 29), D_MODEL)


def test_a_left_padded_row_is_the_row_alone(tmp_path) -> None:
    """transformers' mixer on a left-padded batch (its attention_mask zeroes the padding's
    inputs) against attndsl's layer with `padding`, at the real tokens."""
    net = _mixer()
    text = _spec(4).replace("mask      = causal", "mask      = causal & padding(side = left)")
    left_padded_rows_match(net, renamed(net.state_dict()), text, D_MODEL, tmp_path)


def left_padded_rows_match(net, state: dict, text: str, d_model: int, tmp_path) -> None:
    """transformers' mixer `net` on a batch whose second row is left-padded by 4 gives what
    the spec's `ssm` layer, holding `state`, gives with key_lengths, at the real tokens."""
    weights = tmp_path / "w.safetensors"
    save_file(state, str(weights))
    module = attndsl.loads(text)["ssm"].to_torch(weights=weights)
    x = torch.randn(2, 11, d_model, generator=torch.Generator().manual_seed(3))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, :4] = 0
    with torch.no_grad():
        want = net(x, attention_mask=mask)
        got = module(x, key_lengths=torch.tensor([11, 7]))
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(got[1, 4:].numpy(), want[1, 4:].numpy(), atol=2e-5, rtol=1e-4)


def test_random_mamba2_specs_match_the_reference_and_decode_as_one_pass() -> None:
    """Mamba2 drawn from its own stream: a stack with groups of 3 heads (181), left padding in
    a stack (1526), right padding with a clamped step (341), one head per group with chunks of
    1 and the norm before the gate (241), no norm (2301); 76 and 2744 (the norm before the
    gate) decoding as one pass."""
    from .test_random_specs import check_stream

    check_stream(((181, ("mamba2(groups = 3", "transformer")),
                  (1526, ("mamba2(", "transformer", "side = left")),
                  (341, ("mamba2(", "dt_min = 0.01", "padding")),
                  (241, ("mamba2(", "chunk = 1,", "norm = before_gate")),
                  (2301, ("mamba2(", "norm = none"))),
                 portable=181, decoding=(76, "mamba2("))
    check_stream((), portable=-1, decoding=(2744, "norm = before_gate"))


@pytest.mark.parametrize(("entries", "words"), [
    ("kernel = mamba2(groups = 3)", "must be a multiple of it"),
    ("kernel = mamba2()\n    scale = 0.5", "Mamba2 scales nothing"),
    ("kernel = mamba2()\n    bias = true", "input projections have no bias"),
    ("kv_heads = 1\n    kernel = mamba2()", "write mamba2(groups = n)"),
    ("kernel = mamba2(dt_min = 0.5, dt_max = 0.1)", "dt_max must be a number above dt_min"),
    ("kernel = mamba2(dt_min = -1)", "dt_min must be a number >= 0"),
    ("kernel = mamba2(eps = 0)", "eps must be in"),
    ("kernel = mamba2(norm = first)", "must be one of `after_gate`"),
    ("kernel = mamba2()\n    position = rope", "no positions"),
])
def test_mamba2_diagnostics(entries: str, words: str) -> None:
    text = (f"attention a {{\n    d_model = 16\n    heads = 2\n    {entries}\n"
            "    mask = causal\n}\n")
    with pytest.raises(attndsl.SpecError) as caught:
        attndsl.loads(text, "mamba2.attn")
    assert words in str(caught.value) and "mamba2.attn:" in str(caught.value), str(caught.value)


def _saved(tmp_path, config, edit) -> str:
    """`config` saved to tmp_path, its config.json edited by `edit` (dict -> None), imported:
    the spec's text."""
    import json

    from attndsl.hf_import import import_config

    config.save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    cfg = json.loads(path.read_text())
    edit(cfg)
    path.write_text(json.dumps(cfg))  # (Python's json writes infinity as the bare Infinity)
    return import_config(tmp_path, "right", "none")


def _granite4():
    from transformers import GraniteMoeHybridConfig

    return GraniteMoeHybridConfig(
        hidden_size=48, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, layer_types=["mamba", "attention", "mamba"], mamba_n_heads=4,
        mamba_d_head=24, mamba_d_state=8, vocab_size=61)


@pytest.mark.parametrize("how", ["legacy names", "layers_block_type"])
def test_granite4_reads_its_legacy_layer_names_and_its_alias(tmp_path, how: str) -> None:
    """Granite 4's checkpoints name their layers `mamba` and `attention` (transformers renames
    them), or give them as `layers_block_type` (its attribute_map's alias of layer_types)."""
    def edit(cfg: dict) -> None:
        kinds = ["mamba", "attention", "mamba"]
        if how == "legacy names":
            cfg["layer_types"] = kinds
        else:
            cfg.pop("layer_types")
            cfg["layers_block_type"] = kinds
    text = _saved(tmp_path, _granite4(), edit)
    layers = attndsl.loads(text)["granitemoehybrid"].spec
    kinds = [type(layers.layer_attention(i).kernel).__name__ == "Mamba2" for i in range(3)]
    assert kinds == [True, False, True], text


def test_bamba_bounds_and_rotary_factor_from_its_config(tmp_path) -> None:
    """A step limit [0, Infinity] (bare, as Python's json writes it) bounds nothing, a finite
    one is dt_min and dt_max; rope_parameters' factor wins over Bamba's default half."""
    from transformers import BambaConfig

    config = BambaConfig(hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, attn_layer_indices=[1],
                         mamba_n_heads=6, mamba_d_head=16, mamba_d_state=8, vocab_size=61)

    def edit(cfg: dict) -> None:
        cfg["time_step_limit"] = [0.0, float("inf")]
        cfg["rope_parameters"]["partial_rotary_factor"] = 0.25
    text = _saved(tmp_path / "a", config, edit)
    # (a quarter of 12 is 3: transformers rotates 4 features then, as the rope reader says)
    assert "dt_max" not in text and "dt_min" not in text and "dim = 4)" in text, text
    text = _saved(tmp_path / "b", config, lambda cfg: cfg.update(time_step_limit=[0.01, 3]))
    assert "dt_min = 0.01, dt_max = 3.0)" in text, text


def test_mamba2_groups_that_do_not_divide_the_heads_are_refused_by_name(tmp_path) -> None:
    with pytest.raises(attndsl.SpecError) as caught:
        _saved(tmp_path, _granite4(), lambda cfg: cfg.update(mamba_n_groups=3))
    assert "mamba_n_groups" in str(caught.value) and "must divide 4" in str(caught.value)


@pytest.mark.parametrize("rms_norm", [True, False])
def test_falcon_h1s_norm_orders_match_its_mixer(tmp_path, rms_norm: bool) -> None:
    """`norm = before_gate` (w * rmsnorm_g(y) * silu(z): Falcon-H1's mamba_norm_before_gate)
    and `norm = none` (y * silu(z), no norm.weight: without mamba_rms_norm) against
    transformers' FalconH1Mixer, its multipliers 1."""
    from transformers import FalconH1Config
    from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1Mixer

    config = FalconH1Config(hidden_size=D_MODEL, mamba_n_heads=HEADS, mamba_d_head=P,
                            mamba_d_ssm=INNER, mamba_d_state=N, mamba_n_groups=GROUPS,
                            mamba_d_conv=CONV, mamba_chunk_size=8, mamba_rms_norm=rms_norm,
                            mamba_norm_before_gate=True, num_hidden_layers=1)
    net = FalconH1Mixer(config, layer_idx=0).eval()
    redraw(net, 7)
    # (FalconH1Model registers it, from ssm_multipliers: all 1 here)
    net.register_buffer("mup_vector", torch.ones(1, 1, 2 * INNER + 2 * GROUPS * N + HEADS),
                        persistent=False)
    with torch.no_grad():
        net.A_log.copy_(torch.linspace(-1.0, 0.5, HEADS))
        net.dt_bias.copy_(torch.linspace(-1.5, 0.5, HEADS))
        if rms_norm:
            net.norm.weight.copy_(1.0 + 0.1 * torch.randn(INNER))
    state = dict(net.state_dict())
    if not rms_norm:
        state["norm.weight"] = torch.ones(INNER)
    tensors = renamed(state)
    if not rms_norm:
        del tensors["norm.weight"]
    weights = tmp_path / "w.safetensors"
    save_file(tensors, str(weights))
    norm = "before_gate" if rms_norm else "none"
    layer = attndsl.loads(_spec(5, f", norm = {norm}"))["ssm"]
    assert ("norm.weight" in {w.name for w in weight_table(layer.spec)}) is rms_norm
    models = [layer.onnx_bytes(target=t, weights=weights) for t in ("ort-cpu", "portable")]

    class Net(torch.nn.Module):
        def forward(self, x):
            return net(x)

    agree(Net(), layer.to_torch(weights=weights), models, (1, 17), D_MODEL)
