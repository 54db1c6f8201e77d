"""Mamba's selective state-space layer (docs/LANGUAGE.md, Kernels: `mamba`) against
transformers' MambaMixer, FalconMambaMixer and JambaMambaMixer, built from their config classes
(nothing downloads): the torch module and both ONNX targets (LinearAttention on ort-cpu, the
chunked Scan on portable) at lengths that are not multiples of the chunk, one token and several
chunks; a left-padded batch against each row alone; the random specs that draw it, in one pass
and decoding, against the oracle; and its diagnostics."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

import attndsl
from attndsl.errors import SpecError

from .test_delta_rule import agree
from .test_mamba2 import left_padded_rows_match
from .test_transformers import redraw

D_MODEL, N, CONV, RANK = 16, 6, 4, 3
INNER = 2 * D_MODEL


def _mixer(kind: str = "mamba"):
    import transformers as tf

    common = dict(hidden_size=D_MODEL, num_hidden_layers=1)
    if kind == "jamba":
        from transformers.models.jamba.modeling_jamba import JambaMambaMixer

        config = tf.JambaConfig(mamba_d_state=N, mamba_d_conv=CONV, mamba_expand=2,
                                mamba_dt_rank=RANK, num_attention_heads=4,
                                num_key_value_heads=2, **common)
        net = JambaMambaMixer(config, layer_idx=0)
    elif kind == "falcon_mamba":
        from transformers.models.falcon_mamba.modeling_falcon_mamba import FalconMambaMixer

        config = tf.FalconMambaConfig(state_size=N, conv_kernel=CONV, expand=2,
                                      time_step_rank=RANK, **common)
        net = FalconMambaMixer(config, layer_idx=0, initialize_mixer_weights=False)
    else:
        from transformers.models.mamba.modeling_mamba import MambaMixer

        config = tf.MambaConfig(state_size=N, conv_kernel=CONV, expand=2, time_step_rank=RANK,
                                **common)
        net = MambaMixer(config, layer_idx=0)
    net = net.eval()
    redraw(net, 7)
    with torch.no_grad():  # decays that matter, and a step of a useful size
        net.A_log.copy_(torch.linspace(-1.0, 1.0, INNER * N).reshape(INNER, N))
        net.dt_proj.bias.copy_(torch.linspace(-1.5, 0.5, INNER))
    return net


def renamed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A mixer's tensors under attndsl's names: out_proj its o_proj, the rest as they are."""
    return {("o_proj." + k.split(".", 1)[1] if k.startswith("out_proj.") else k): v.contiguous()
            for k, v in state.items()}


def _spec(chunk: int, norm: str = "none", mask: str = "causal") -> str:
    return f"""
attention ssm {{
    d_model   = {D_MODEL}
    heads     = {INNER}
    head_dim  = {N}
    value_dim = 1
    bias      = false
    kernel    = mamba(rank = {RANK}, conv = {CONV}, chunk = {chunk}, norm = {norm})
    mask      = {mask}
}}
"""


@pytest.mark.parametrize(("kind", "chunk", "norm"), [
    ("mamba", 5, "none"), ("mamba", 16, "none"), ("falcon_mamba", 4, "weightless"),
    ("jamba", 7, "weighted")])
def test_mamba_matches_transformers_mixers(tmp_path, kind: str, chunk: int, norm: str) -> None:
    net = _mixer(kind)
    weights = tmp_path / "w.safetensors"
    save_file(renamed(net.state_dict()), str(weights))
    text = _spec(chunk, norm)
    if kind == "jamba":  # (Jamba's norms' eps: its rms_norm_eps)
        text = text.replace(f"norm = {norm})", f"norm = {norm}, eps = 1e-6)")
    layer = attndsl.loads(text)["ssm"]
    models = [layer.onnx_bytes(target=t, weights=weights) for t in ("ort-cpu", "portable")]

    class Net(torch.nn.Module):
        def forward(self, x):
            return net(x)

    agree(Net(), layer.to_torch(weights=weights), models, (1, 5, 17, 40), D_MODEL)


def test_a_left_padded_row_is_the_row_alone(tmp_path) -> None:
    """transformers' mixer on a left-padded batch (its attention_mask zeroes the padding's
    inputs) against attndsl's layer with `padding`, at the real tokens."""
    net = _mixer()
    left_padded_rows_match(net, renamed(net.state_dict()),
                           _spec(4, mask="causal & padding(side = left)"), D_MODEL, tmp_path)


def test_random_mamba_specs_match_the_reference_and_decode_as_one_pass() -> None:
    """Mamba drawn from its own stream (54): in a stack beside a second attention of it,
    weighted norms and chunks of 1 (88), and two more (395; 775, weightless norms), in one
    pass on every backend and target; 60 decoding as one pass."""
    from .test_random_specs import check_stream

    check_stream(((88, ("mamba(rank", "norm = weighted", "chunk = 1,", "transformer")),
                  (395, ("mamba(rank",)), (775, ("mamba(rank", "norm = weightless"))),
                 portable=395, decoding=(60, "mamba(rank"))


def test_wider_values_share_their_heads_step_and_decay(tmp_path) -> None:
    """value_dim 3 (each head's state N x 3, one step and decay per head): every backend and
    target against the oracle, in one pass and decoding as prefill + steps."""
    from .test_decoding import _check_decoding

    text = _spec(5).replace("value_dim = 1", "value_dim = 3").replace(
        "mask      = causal", "mask      = causal & padding(side = left)")
    path = tmp_path / "wide.attn"
    path.write_text(text)
    from attndsl.cli import main

    assert main(["verify", str(path), "--lengths", "1,6,23", "-q"]) == 0
    _check_decoding(attndsl.loads(_spec(5).replace("value_dim = 1", "value_dim = 3"))["ssm"])


@pytest.mark.parametrize(("entries", "words"), [
    ("kernel = mamba(rank = 2)\n    value_dim = 1\n    scale = 0.5", "Mamba scales nothing"),
    ("kernel = mamba(rank = 2)\n    value_dim = 1\n    bias = true", "input projection has no"),
    ("kernel = mamba(rank = 2, norm = first)\n    value_dim = 1", "must be one of `none`"),
    ("kernel = mamba()\n    value_dim = 1", "rank"),
    ("kernel = mamba(rank = 2)\n    value_dim = 1\n    position = rope", "no positions"),
])
def test_mamba_diagnostics(entries: str, words: str) -> None:
    text = f"attention a {{\n    d_model = 16\n    heads = 8\n    head_dim = 4\n    {entries}\n" \
           f"    mask = causal\n}}\n"
    with pytest.raises(SpecError) as err:
        attndsl.loads(text)
    assert words in str(err.value), str(err.value)
