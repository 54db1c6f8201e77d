"""Mechanisms as modules (`attndsl/mechanisms/`): each one found by its presence is a key the
checker, the language server and docs/LANGUAGE.md know, its `apply` nodes have an oracle
reading, and its specs run the same on the reference, torch and every target. The module
written in this form, `qk_norm_after_rope` (Hunyuan), against the oracle on random specs and
refused where it cannot apply (its import and generation are held to transformers in
tests/test_hf_families.py and tests/test_generation.py)."""

from __future__ import annotations

import contextlib

import pytest

import attndsl
from attndsl.backends import reference_kernels
from attndsl.backends.reference_mechanisms import READINGS
from attndsl.check.vocabulary import KEYS, VALUES, WORDS
from attndsl.editor import hover
from attndsl.errors import SpecError
from attndsl.hf_fields import TYPES
from attndsl.ir import Op
from attndsl.mechanisms import HEADS, KERNELS, MECHANISMS

from .conftest import ROOT
from .specgen import random_spec
from .test_random_specs import check_random_spec


@pytest.mark.parametrize("key", list(MECHANISMS))
def test_a_mechanism_module_is_a_key_everywhere(key: str) -> None:
    mechanism = MECHANISMS[key]
    assert key in KEYS["attention"]
    if mechanism.forms:  # calls, and `none`
        assert set(VALUES[key]) == {"none", *mechanism.forms} and key not in WORDS
    else:  # plain words (a number besides, for softcap)
        assert WORDS[key] == ("none", *mechanism.words) and key not in VALUES
    assert f"| `{key}` |" in (ROOT / "docs" / "LANGUAGE.md").read_text()
    text = f"attention a {{\n    d_model = 64\n    heads = 4\n    {key} = none\n}}\n"
    assert "`" + key + "`" in (hover(text, 3, 6) or "")
    if mechanism.attributes:  # it emits `apply` nodes: the oracle reads them on its own
        assert key in READINGS


_STACK = ("attention a {{\n    d_model = 64\n    heads = 4\n}}\n"
          "transformer t {{\n    attention = a\n    layers = 1\n    ffn = gelu(hidden = 128)\n"
          "    norm = layernorm(pre)\n{extra}}}\n")


@pytest.mark.parametrize("key", list(HEADS))
def test_a_head_mechanism_is_a_language_models_key(key: str) -> None:
    """A mechanism with a `head_key` (the softcap's `logit_softcap`) is a transformer key of
    docs/LANGUAGE.md that needs `vocab`, its config field is typed for the import, and a
    language model's logits are its `apply` node, after the LM head's linear."""
    mechanism = HEADS[key]
    assert key in KEYS["transformer"] and f"| `{key}` |" in (
        ROOT / "docs" / "LANGUAGE.md").read_text()
    assert mechanism.head_field in TYPES
    with pytest.raises(SpecError, match=f"`{key}` needs `vocab`"):
        attndsl.loads(_STACK.format(extra=f"    {key} = 2.5\n"))
    graph = attndsl.loads(_STACK.format(extra=f"    vocab = 32\n    {key} = 2.5\n"))["t"].graph()
    nodes = {n.out: n for n in graph.nodes}
    logits = nodes[graph.output]
    assert logits.op is Op.APPLY and logits.attr("mechanism") == mechanism.key
    assert nodes[logits.args[0]].op is Op.LINEAR


@pytest.mark.parametrize("name", list(KERNELS))
def test_a_kernel_module_is_a_value_everywhere(name: str) -> None:
    """A kernel module found by its presence is a `kernel` value the checker and completion
    know with its parameters, in docs/LANGUAGE.md's row for `kernel`; the oracle reads its own
    `kernel` node by name (its own reading, not the module's arithmetic); the random specs draw
    it, so it runs against the oracle on every backend."""
    kernel = KERNELS[name]
    assert VALUES["kernel"][name] == kernel.params
    row = next(line for line in (ROOT / "docs" / "LANGUAGE.md").read_text().splitlines()
               if line.startswith("| `kernel` |"))
    assert f"`{name}(" in row
    needed = ", ".join(f"{p} = 2" for p, required in kernel.params if required)
    masks = ("full", "causal")  # the checker takes its call with one of them (else SpecError)
    taken = []
    for mask in masks:
        with contextlib.suppress(SpecError):
            taken.append(attndsl.loads(f"attention a {{\n    d_model = 64\n    heads = 4\n    "
                                       f"mask = {mask}\n    kernel = {name}({needed})\n}}\n"))
    assert taken, name
    if not getattr(kernel, "softmax_core", False):  # its own `kernel` node
        assert name in reference_kernels.READINGS
        assert reference_kernels.READINGS[name].__module__.startswith("attndsl.backends.")
    assert any(f"kernel = {name}(" in random_spec(seed) for seed in range(400))


def _seeds_with(key: str, count: int) -> list[int]:
    return [seed for seed in range(400) if f"{key} =" in random_spec(seed)][:count]


@pytest.mark.parametrize("seed", _seeds_with("qk_norm_after_rope", 3))
def test_random_specs_with_qk_norm_after_rope_match_the_reference(seed: int) -> None:
    check_random_spec(seed, portable=True)


def test_qk_norm_after_rope_norms_the_rotated_heads() -> None:
    """Its norms follow RoPE in the graph and are the only qk norms there."""
    layer = attndsl.load(ROOT / "examples" / "hunyuan_dense.attn")["hunyuan_attn"]
    normed = [n for n in layer.graph().nodes if n.op.value == "norm"]
    assert [(n.attr("module"), n.args[0]) for n in normed] == [("q_norm", "q_rope"),
                                                                ("k_norm", "k_rope")]


@pytest.mark.parametrize(("entries", "words"), [
    ("kernel = delta_rule(key_heads = 2)\n    mask = causal",
     "`qk_norm_after_rope` does not apply to the delta rule"),
    ("latent = mla(kv_rank = 8, rope_dim = 4)", "qk_norm_after_rope"),
    ("kernel = lsh(buckets = 4, chunk = 8)",
     "`qk_norm_after_rope` does not apply to an LSH kernel"),
])
def test_qk_norm_after_rope_is_refused_where_it_cannot_apply(entries: str, words: str) -> None:
    text = (f"attention a {{\n    d_model = 64\n    heads = 4\n    position = rope(theta = 10)\n"
            f"    qk_norm_after_rope = rmsnorm\n    {entries}\n}}\n")
    with pytest.raises(SpecError) as e:
        attndsl.loads(text)
    assert words in str(e.value)
    assert ":5:" in str(e.value) or ":6:" in str(e.value)  # located at a key of the block


# 22: a stack's power temperature (its portable export is seconds; test_random_specs exports
# the power temperature's stream at 6); 28: a log temperature's offset
OFFSET_SEEDS = [s for s in _seeds_with("temperature", 60) if ", offset = " in random_spec(s)][:2]


@pytest.mark.parametrize("seed", OFFSET_SEEDS)
def test_random_specs_with_a_temperature_offset_match_the_reference(seed: int) -> None:
    """Every backend and target; the portable export (torch.onnx.export: seconds) on one spec
    of the stream, as test_random_specs does, the last."""
    check_random_spec(seed, portable=seed == OFFSET_SEEDS[-1])


def test_the_temperature_offset_moves_where_the_floor_steps() -> None:
    """docs/LANGUAGE.md: 1 + a * ln(1 + floor((p + offset) / f)); with f = 2 the floor steps
    at p = 1, 3 for offset 1 (Llama 4) and at p = 2 for offset 0 (Ministral 3)."""
    import numpy as np

    x = np.ones((1, 1, 4, 1))
    for offset, steps in ((1, [0, 1, 1, 2]), (0, [0, 0, 1, 1])):
        got = READINGS["temperature"](x, {"floor": 2, "scale": 1.0, "offset": offset,
                                          "kind": "log"}, {})
        assert np.allclose(got[0, 0, :, 0], 1 + np.log1p(steps)), offset
    text = "attention a {\n    d_model = 64\n    heads = 4\n    temperature = log(floor = 2, " \
           "scale = 1.0, offset = -1)\n}\n"
    with pytest.raises(SpecError, match="temperature offset"):
        attndsl.loads(text)


def test_the_power_temperature_is_beams_scalable_softmax() -> None:
    """docs/LANGUAGE.md: `power(base = b, exponent = e, offset = o)` is (1 + (p + o) / b) ** e,
    read by the oracle as transformers' Beam computes it (compute_attention_scaling: offset 1,
    base 2048, exponent 0.1) at positions up to 20,000."""
    import numpy as np
    import torch
    from transformers.models.beam.modeling_beam import compute_attention_scaling

    positions = np.arange(20000)
    want = compute_attention_scaling(torch.from_numpy(positions)[None]).double().numpy()
    got = READINGS["temperature"](np.ones((1, 1, len(positions), 1)),
                                  {"floor": 2048, "scale": 0.1, "offset": 1, "kind": "power"},
                                  {})
    assert np.abs(got - want).max() < 1e-6  # (transformers computes it in float32)
    assert float(got.max() - got.min()) > 0.25  # (1 + 20000 / 2048) ** 0.1 = 1.268


@pytest.mark.parametrize(("seed", "form"), [
    (30, "softplus(per_head = true)"), (65, "softplus"), (99, "softplus(per_head = true)")])
def test_random_specs_with_each_output_gate_form_match_the_reference(seed: int,
                                                                     form: str) -> None:
    """The gate's form is drawn from its own stream: a softplus per head (30; 99 in a stack)
    and for every value (65), past the default seeds (seed 4 there: a sigmoid per head)."""
    assert f"output_gate = {form}\n" in random_spec(seed)
    check_random_spec(seed, portable=seed == 30)


def test_a_gate_per_head_matches_lfm3_attention(tmp_path) -> None:
    """LFM3's attention (Qwen3's, with each head's output times sigmoid of its own `g_proj`
    row): attndsl reads g_proj as each head's one gate row after its query rows
    (`output_gate = sigmoid(per_head = true)`), on the torch module and both ONNX targets."""
    import numpy as np
    import onnxruntime as ort
    import torch
    from safetensors.torch import save_file
    from transformers import Lfm3Config
    from transformers.models.lfm3.modeling_lfm3 import Lfm3Attention, Lfm3RotaryEmbedding

    d, heads, kv, dim = 40, 4, 2, 12
    config = Lfm3Config(hidden_size=d, num_attention_heads=heads, num_key_value_heads=kv,
                        head_dim=dim, norm_eps=1e-5, num_hidden_layers=1,
                        layer_types=["full_attention"], max_position_embeddings=64,
                        rope_parameters={"full_attention": {"rope_type": "default",
                                                            "rope_theta": 10000.0}})
    config._attn_implementation = "eager"
    attn = Lfm3Attention(config, layer_idx=0).eval()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in attn.parameters():  # far from uniform attention, and gates far from 1/2
            p.copy_(torch.randn(p.shape, generator=g) * 2 / p.shape[-1] ** 0.5)
    state = dict(attn.state_dict())
    q, gate = state.pop("q_proj.weight"), state.pop("g_proj.weight")
    state["q_proj.weight"] = torch.cat([q.view(heads, dim, d), gate.view(heads, 1, d)], 1) \
        .reshape(heads * (dim + 1), d)  # per head: its query rows, then its gate row
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(weights))
    layer = attndsl.loads(f"""attention a {{
    d_model = {d}
    heads = {heads}
    kv_heads = {kv}
    head_dim = {dim}
    bias = false
    qk_norm = rmsnorm(eps = 1e-5)
    position = rope(theta = 10000)
    output_gate = sigmoid(per_head = true)
    mask = causal
}}""")["a"]
    module = layer.to_torch(weights=weights)
    models = {t: ort.InferenceSession(layer.onnx_bytes(target=t, weights=weights),
                                      providers=["CPUExecutionProvider"])
              for t in ("ort-cpu", "portable")}
    for L in (1, 5, 33):
        x = torch.randn(2, L, d, generator=torch.Generator().manual_seed(L))
        rotary = Lfm3RotaryEmbedding(config)(x, torch.arange(L)[None], "full_attention")
        causal = torch.full((L, L), float("-inf")).triu(1)[None, None]
        with torch.no_grad():
            ref = attn(x, rotary, causal)[0].numpy()
            outs = [module(x).numpy(), *(s.run(None, {"x": x.numpy()})[0]
                                         for s in models.values())]
        for out in outs:
            err = float(np.abs(out - ref).max())
            assert err <= 1e-4 * max(1.0, float(np.abs(ref).max())), err
