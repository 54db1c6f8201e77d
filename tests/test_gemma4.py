"""Gemma 4's attention (issue 41, item 5): keys and values shared across layers
(`kv_shared_layers`), values equal to the keys' rows (`values = keys`), the scale-less value
norm (`v_norm`), a head size per layer kind, and each layer's learned `layer_scalar`: the
checker's diagnostics, the weights a sharing layer lacks, and Gemma 4's text model imported
from a tiny checkpoint against transformers (logits with left padding, greedy tokens)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

import attndsl
from attndsl.cli import main
from attndsl.decoding import positions_of
from attndsl.errors import SpecError

from .test_mrope import prefill

tf = pytest.importorskip("transformers")

EXAMPLE = Path(__file__).parent.parent / "examples" / "gemma4_kv_sharing.attn"
ATTN = """
attention local {
    d_model = 64
    heads = 4
    kv_heads = 2
    position = rope
    mask = causal & window(left = 3, right = 0)
}
attention global {
    d_model = 64
    heads = 4
    kv_heads = 1
    head_dim = 32
    values = keys
    position = rope
    mask = causal
}
"""


def _stack(pattern: str, layers: int, shared: int, extra: str = "") -> str:
    return ATTN + extra + (f"transformer t {{\n    attention = {pattern}\n    layers = {layers}\n"
                           f"    kv_shared_layers = {shared}\n    ffn = geglu(64)\n"
                           "    norm = rmsnorm(sandwich)\n}\n")


def test_a_sharing_layer_reads_the_last_earlier_layer_of_its_attention() -> None:
    spec = attndsl.load(EXAMPLE)["gemma4_lm"].spec
    assert [spec.kv_owner(i) for i in range(spec.layers)] == [None, None, 0, 1]
    names = {w.name for w in attndsl.load(EXAMPLE)["gemma4_lm"].graph().weights}
    for i in (2, 3):  # queries, output and norms of their own; no keys or values
        assert {f"layers.{i}.self_attn.q_proj.weight", f"layers.{i}.self_attn.q_norm.weight",
                f"layers.{i}.self_attn.o_proj.weight", f"layers.{i}.layer_scalar"} <= names
        assert not any(n.startswith(f"layers.{i}.self_attn.{p}") for n in names
                       for p in ("k_proj", "v_proj", "k_norm"))
    assert "layers.1.self_attn.k_proj.weight" in names  # the full layers' values: the keys
    assert not any("v_proj" in n for n in names if n.startswith("layers.1."))


@pytest.mark.parametrize(("text", "words"), [
    (_stack("[local, global]", 4, 4), "kv_shared_layers must be in [0, 3]"),
    (_stack("[local, local, global]", 3, 1), "layer 2 (`global`) has no earlier layer"),
    (_stack("mla", 3, 1, "attention mla {\n    d_model = 64\n    heads = 4\n"
                         "    latent = mla(kv_rank = 16, rope_dim = 4)\n"
                         "    position = rope\n    mask = causal\n}\n"),
     "needs a softmax self attention with its own q, k and v projections"),
    (ATTN.replace("values = keys", "values = keys\n    value_dim = 16"),
     "`values = keys` makes the values the keys' rows"),
    (ATTN.replace("values = keys", "values = keys\n    bias = [q, v]"), "no `v` bias"),
])
def test_what_cannot_share_or_equal_is_located(text: str, words: str) -> None:
    with pytest.raises(SpecError, match=words.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)")) as err:
        attndsl.loads(text, "g.attn")
    assert "g.attn:" in str(err.value)


def test_onnxruntime_genai_is_refused_for_shared_caches(tmp_path: Path, capsys) -> None:
    text = _stack("[local, local]", 3, 1).replace("ffn = geglu(64)",
                                                  "ffn = geglu(64)\n    vocab = 50")
    spec = tmp_path / "s.attn"
    spec.write_text(text)
    assert main(["compile", str(spec), "--export", "genai", "-o", str(tmp_path / "g")]) != 0
    assert "reuse an earlier layer's (`kv_shared_layers`)" in capsys.readouterr().err
    assert not (tmp_path / "g").exists()


def _gemma4(tmp_path: Path, ple: int = 0):
    """A tiny Gemma 4 text checkpoint: sliding and full layers (its own head size, one kv
    head and values equal to keys), the last two layers reusing layers 2 and 1, random norms
    and layer scalars; `ple`: per-layer inputs of that width."""
    config = tf.Gemma4TextConfig(
        vocab_size=61, hidden_size=64, intermediate_size=96, num_hidden_layers=5,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
        num_global_key_value_heads=1, layer_types=["sliding_attention", "full_attention",
                                                    "sliding_attention", "sliding_attention",
                                                    "full_attention"],
        sliding_window=4, hidden_size_per_layer_input=ple, vocab_size_per_layer_input=61,
        num_kv_shared_layers=2,
        attention_k_eq_v=True, final_logit_softcapping=30.0, max_position_embeddings=128,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = tf.Gemma4ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.3 if p.dim() > 1 else 0.1)
            if p.dim() == 1 and "norm" in name:
                p.add_(1.0)
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(torch.rand(1) + 0.5)
    folder = tmp_path / "hf"
    model.save_pretrained(folder)
    spec = tmp_path / "gemma4.attn"
    assert main(["import", str(folder), "-o", str(spec)]) == 0
    text = spec.read_text()
    assert "kv_shared_layers = 2" in text and "values   = keys" in text
    return model, folder, attndsl.load(spec)["gemma4"]


def _logits(model, ids: np.ndarray, **kw) -> np.ndarray:
    # (transformers 5.23's Gemma 4 without per-layer inputs slices them when it shares keys
    # and logits_to_keep is an int, and fails: every position's logits, by index)
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids), logits_to_keep=torch.arange(
            ids.shape[1]), **{k: torch.from_numpy(v) for k, v in kw.items()}).logits.numpy()


@pytest.mark.parametrize("ple", [0, 8], ids=["plain", "per-layer-inputs"])
def test_gemma4_text_gives_transformers_logits_and_tokens(tmp_path: Path, capsys,
                                                         ple: int) -> None:
    """B = 2, the second row left-padded: the decoding model's prefill and the one-pass model
    on each target (and torch) within 1e-4 x max(1, |ref|) of Gemma4ForCausalLM at every real
    token, without and with per-layer inputs; then attndsl generate's greedy tokens are
    transformers' (its greedy argmax over full forward passes, as its own generate trips on
    the same slicing without per-layer inputs)."""
    model, folder, layer = _gemma4(tmp_path, ple)
    assert (layer.spec.per_layer_inputs is not None) == bool(ple)
    rng = np.random.default_rng(2)
    B, L = 2, 11
    ids = rng.integers(3, 61, size=(B, L)).astype(np.int64)
    want = _logits(model, ids)
    bound = 1e-4 * max(1.0, float(np.abs(want).max()))
    for target in ("ort-cpu", "ort-cuda", "portable"):
        session = ort.InferenceSession(layer.onnx_bytes(target=target, weights=folder),
                                       providers=["CPUExecutionProvider"])
        assert np.abs(session.run(None, {"input_ids": ids})[0] - want).max() <= bound, target
    with torch.no_grad():
        got = layer.to_torch(weights=folder)(input_ids=torch.from_numpy(ids)).numpy()
    assert np.abs(got - want).max() <= bound, "torch"
    mask = np.ones((B, L), np.int64)
    mask[1, :4] = 0
    ids[1, :4] = 0
    positions = positions_of(mask)
    want = _logits(model, ids, attention_mask=mask, position_ids=positions)
    got = prefill(layer.decoder_bytes(target="portable", weights=folder),
                  {"input_ids": ids, "attention_mask": mask, "position_ids": positions})
    real = mask.astype(bool)
    assert np.abs(got[real] - want[real]).max() <= 1e-4 * max(1.0, np.abs(want[real]).max())
    out = tmp_path / "dec"
    assert main(["compile", str(tmp_path / "gemma4.attn"), "--export", "onnx", "--decode",
                 "--weights", str(folder), "-o", str(out), "-q"]) == 0
    for prompt in ([5, 9, 11, 3], [7, 1]):
        tokens = list(prompt)
        for _ in range(6):
            tokens.append(int(_logits(model, np.array([tokens]))[0, -1].argmax()))
        capsys.readouterr()
        assert main(["generate", str(out / "gemma4.decode.onnx"), "--prompt-ids",
                     ",".join(map(str, prompt)), "--max-new", "6", "-q"]) == 0
        ours = [int(t) for t in capsys.readouterr().out.splitlines()[0].split(",")]
        assert ours == tokens[len(prompt):], prompt


def test_random_specs_with_gemma4s_mechanisms_match_the_reference() -> None:
    """Drawn from their own generator streams: a stack sharing keys with values equal to keys
    (134), the value norm and layer scalars (7, 9), per-layer inputs (41); random decodable
    stacks sharing keys (88, 101) decode as one pass on every backend and target."""
    from .specgen import random_spec
    from .test_decoding import _check_decoding
    from .test_random_specs import check_random_spec

    for seed, words in ((134, ("kv_shared_layers",)), (7, ("layer_scalar",)),
                        (9, ("v_norm", "values = keys")), (41, ("per_layer_inputs",))):
        assert all(w in random_spec(seed) for w in words), seed
        check_random_spec(seed, portable=seed == 134)
    for seed in (88, 101):
        text = random_spec(seed, decoding=True)
        assert "kv_shared_layers" in text
        program = attndsl.loads(text, f"random-{seed}.attn")
        _check_decoding(program[list(program)[-1]])


def test_experts_and_wider_shared_mlps_are_refused_naming_them(tmp_path: Path,
                                                               capsys) -> None:
    """Gemma 4's mixture-of-experts block and the double-wide MLP of its sharing layers are
    refused, each named, and nothing is written."""
    for name, extra, words in (
            ("moe", {"enable_moe_block": True, "num_experts": 4, "top_k_experts": 2,
                     "moe_intermediate_size": 32},
             "`enable_moe_block` = true: Gemma 4's mixture-of-experts block"),
            ("wide", {"num_kv_shared_layers": 1, "use_double_wide_mlp": True,
                      "layer_types": ["full_attention"] * 2},
             "`use_double_wide_mlp` = true: the layers sharing keys and values")):
        config = tf.Gemma4TextConfig(**{
            "vocab_size": 61, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "global_head_dim": 32, "hidden_size_per_layer_input": 8,
            "vocab_size_per_layer_input": 61, **extra})
        config.save_pretrained(tmp_path / name)
        out = tmp_path / f"{name}.attn"
        assert main(["import", str(tmp_path / name), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err
        assert not out.exists()


def test_full_layers_sizes_come_from_global_head_dim_without_per_layer_config(
        tmp_path: Path, capsys) -> None:
    """A config.json with `global_head_dim` and `num_global_key_value_heads` but no
    `per_layer_config` (what Gemma4TextConfig makes of them): the full layers get that head
    size and, with attention_k_eq_v, those kv heads; layers of one kind whose per_layer_config
    entries differ are refused."""
    import json

    config = tf.Gemma4TextConfig(vocab_size=61, hidden_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                 global_head_dim=32, num_global_key_value_heads=1,
                                 attention_k_eq_v=True, hidden_size_per_layer_input=0,
                                 layer_types=["sliding_attention", "full_attention"])
    saved = config.to_dict()
    assert saved.pop("per_layer_config")["1"] == {"head_dim": 32, "num_key_value_heads": 1}
    folder = tmp_path / "global"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {**saved, "global_head_dim": 32, "num_global_key_value_heads": 1}))
    assert main(["import", str(folder), "-o", str(tmp_path / "g.attn")]) == 0
    full = attndsl.load(tmp_path / "g.attn")["gemma4_global"].spec
    assert (full.head_dim, full.kv_heads) == (32, 1)
    (folder / "config.json").write_text(json.dumps({**saved, "layer_types": [
        "full_attention"] * 2, "per_layer_config": {"0": {"head_dim": 32}, "1": {"head_dim": 64}}}))
    capsys.readouterr()
    assert main(["import", str(folder), "-o", str(tmp_path / "h.attn")]) == 2
    assert "layer 1 (full_attention) differs" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "words"), [
    (_stack("[local, local]", 2, 0).replace("ffn = geglu(64)", "ffn = geglu(64)\n    vocab = 50"
                                            "\n    per_layer_inputs = ple(width = 4, vocab = 10)"),
     "the per-layer inputs' vocabulary (10) must hold every token id of the stack's (50)"),
])
def test_per_layer_inputs_read_every_token(text: str, words: str) -> None:
    with pytest.raises(SpecError, match=re.escape(words)):
        attndsl.loads(text, "g.attn")


def test_values_equal_to_keys_take_a_bias_list_without_v() -> None:
    for bias in ("[q, k]", "[k]", "[q, k, o]"):
        spec = attndsl.loads(ATTN.replace("values = keys", f"values = keys\n    bias = {bias}"))
        assert "v" not in spec["global"].spec.bias or bias == "true"
