"""Issue 39, items 2 and 15: what a genai folder (`compile --export genai`) writes for a
checkpoint without an eos token, and the folder of a delta-rule model (Qwen3-Next) that
onnxruntime-genai runs with its recurrent states. Tiny random checkpoints built from config
classes (nothing downloads); tokens compared with transformers' greedy `generate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers as tf

from attndsl.cli import main

from .test_delta_rule import tiny_qwen3_next
from .test_generation import (
    NEW,
    PROMPTS,
    SIZES,
    _transformers_tokens,
    genai_generates,
    genai_tokens,
)
from .test_hf_families import redraw

MAX_NEW = 40  # long enough that the random model emits token 0 (the old eos) on the way


def _compile(folder: Path, spec: Path, out: Path, *extra: str) -> None:
    assert main(["import", str(folder), "-o", str(spec)]) == 0
    assert main(["compile", str(spec), "--export", "genai", "--weights", str(folder),
                 "-o", str(out), *extra]) == 0


@pytest.fixture(scope="module")
def no_eos(tmp_path_factory):
    """A Llama checkpoint whose config.json has eos, bos and pad null (and whose
    generation_config.json names none), and transformers' greedy tokens for one prompt."""
    root = tmp_path_factory.mktemp("no_eos")
    config = tf.LlamaConfig(num_hidden_layers=2, eos_token_id=None, bos_token_id=None,
                            pad_token_id=None, **SIZES)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 11, unit_offset=False)
    model.save_pretrained(root / "hf")
    saved = json.loads((root / "hf" / "config.json").read_text())
    assert saved.get("eos_token_id") is None and saved.get("pad_token_id") is None
    prompt = [5, 7, 9, 0, 3]
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=MAX_NEW,
                             do_sample=False)
    want = out[0, len(prompt):].tolist()
    assert len(want) == MAX_NEW, "transformers stopped early: the checkpoint has an eos"
    assert 0 in want[:-1], "the old eos 0 must come up before the end to tell the two apart"
    return root, prompt, want


def test_a_checkpoint_without_eos_generates_to_the_end(no_eos, capsys) -> None:
    """eos null: genai_config.json gets eos_token_id [] (not 0), compile says so on the
    terminal, and `attndsl generate` runs to --max-new with transformers' tokens, through the
    token 0 at which it used to stop."""
    root, prompt, want = no_eos
    capsys.readouterr()
    _compile(root / "hf", root / "l.attn", root / "out", "--context-length", "64")
    said = capsys.readouterr().out
    assert "no eos" in said and "run to their maximum length" in said, said
    assert "stop column" in said, said  # what onnxruntime-genai reads instead, said plainly
    config = json.loads((root / "out" / "llama" / "genai_config.json").read_text())["model"]
    assert config["eos_token_id"] == SIZES["vocab_size"], config  # the stop column
    argv = ["generate", str(root / "out" / "llama"), "--prompt-ids",
            ",".join(map(str, prompt)), "--max-new", str(MAX_NEW), "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == [want]


def test_onnxruntime_genai_runs_to_the_end_through_a_stop_column(no_eos) -> None:
    """onnxruntime-genai 0.18 replaces an empty eos_token_id by pad_token_id: the folder's eos
    is instead a logits column at the lowest float (id V, vocab_size V + 1), which greedy
    search never picks, so onnxruntime-genai gives transformers' tokens to the end; the other
    columns are the model's logits, and `attndsl run` still takes ids below V only."""
    import numpy as np

    og = pytest.importorskip("onnxruntime_genai")
    root, prompt, want = no_eos
    folder = root / "out" / "llama"
    if not folder.is_dir():
        _compile(root / "hf", root / "l.attn", root / "out", "--context-length", "64")
    config = json.loads((folder / "genai_config.json").read_text())["model"]
    vocab = SIZES["vocab_size"]
    assert (config["eos_token_id"], config["vocab_size"]) == (vocab, vocab + 1)
    assert genai_tokens(og, og.Model(str(folder)), prompt, MAX_NEW) == want
    out = root / "logits.npz"
    assert main(["run", str(folder), "--length", "5", "--output", str(out)]) == 0
    with np.load(out) as saved:
        logits = saved["logits"]
    assert logits.shape[-1] == vocab + 1
    assert (logits[..., vocab] == np.finfo(np.float32).min).all()
    assert (logits[..., :vocab].max(-1) > logits[..., vocab]).all()
    argv = ["generate", str(folder), "--prompt-ids", f"1,{vocab}", "--max-new", "2"]
    assert main(argv) == 2  # the stop column's id is no token of the vocabulary


def test_the_eos_of_generation_config_json_stands_in_for_a_null_one(no_eos, capsys) -> None:
    """config.json's eos null, generation_config.json's 7 (which transformers' generate
    reads): the folder stops at 7, and compile says where it came from."""
    root, _, _ = no_eos
    hf = root / "hf_gen"
    hf.mkdir()
    for f in (root / "hf").iterdir():
        (hf / f.name).write_bytes(f.read_bytes())
    generation = json.loads((hf / "generation_config.json").read_text())
    (hf / "generation_config.json").write_text(json.dumps({**generation, "eos_token_id": 7}))
    capsys.readouterr()
    _compile(hf, root / "g.attn", root / "out_gen", "--context-length", "64")
    assert "eos 7 (from generation_config.json)" in capsys.readouterr().out
    config = json.loads((root / "out_gen" / "llama" / "genai_config.json").read_text())
    assert config["model"]["eos_token_id"] == 7


@pytest.mark.parametrize("target", ["ort-cpu", "portable"])
def test_a_qwen3_next_genai_folder_generates_as_transformers(tmp_path: Path, target: str,
                                                             capsys) -> None:
    """Qwen3-Next (three delta-rule layers and a gated softmax layer): `compile --export
    genai` writes a folder whose genai_config.json names each delta-rule layer's convolution
    window and state (past_conv_names, past_recurrent_names), which onnxruntime-genai's
    RecurrentState binds; onnxruntime-genai and `attndsl generate` give transformers' greedy
    tokens from it."""
    og = pytest.importorskip("onnxruntime_genai")
    model = tiny_qwen3_next(tmp_path / "hf")
    _compile(tmp_path / "hf", tmp_path / "q.attn", tmp_path / "out", "--target", target,
             "--context-length", "64")
    folder = tmp_path / "out" / "qwen3_next"
    decoder = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]
    assert decoder["inputs"]["past_recurrent_names"] == "past_key_values.%d.state"
    assert decoder["outputs"]["present_conv_names"] == "present.%d.conv"
    assert (decoder["head_size"], decoder["num_key_value_heads"]) == (16, 2)  # layer 3's
    want = _transformers_tokens(model)
    assert len({t for row in want for t in row}) >= 4, "a degenerate model proves little"
    genai_generates(og, folder, want)  # each prompt alone, up to and with eos 2
    argv = ["generate", str(folder), "--max-new", str(NEW), "--json"]  # the folder's eos, 2
    for p in PROMPTS:
        argv += ["--prompt-ids", ",".join(map(str, p))]
    capsys.readouterr()
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)["tokens"]
    assert got == [row[: row.index(2) + 1] if 2 in row else row for row in want]


def test_a_model_of_delta_rule_layers_alone_runs_in_onnxruntime_genai(tmp_path: Path,
                                                                     capsys) -> None:
    """Every layer a delta rule (no key/value cache at all): the folder still runs in
    onnxruntime-genai, with the tokens `attndsl generate` gives from it (transformers' own
    cache cannot generate such a Qwen3-Next: it asks a full-attention layer for its length)."""
    og = pytest.importorskip("onnxruntime_genai")
    config = tf.Qwen3NextConfig(
        num_hidden_layers=2, layer_types=["linear_attention"] * 2, head_dim=16,
        moe_intermediate_size=32, shared_expert_intermediate_size=48, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
        num_experts=4, num_experts_per_tok=2, bos_token_id=1, eos_token_id=2, **SIZES)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    redraw(model, 11, unit_offset=True)
    model.save_pretrained(tmp_path / "hf")
    _compile(tmp_path / "hf", tmp_path / "q.attn", tmp_path / "out", "--context-length", "64",
             "--eos", "96")
    folder = tmp_path / "out" / "qwen3_next"
    prompt = PROMPTS[0]
    capsys.readouterr()
    assert main(["generate", str(folder), "--prompt-ids", ",".join(map(str, prompt)),
                 "--max-new", str(NEW), "--json"]) == 0
    want = json.loads(capsys.readouterr().out)["tokens"]
    assert len(set(want[0])) >= 4, "a degenerate model proves little"
    assert genai_tokens(og, og.Model(str(folder)), prompt, NEW) == want[0]
    # the states cannot be cut back (docs/LANGUAGE.md, Decoding): only a rewind to 0 works
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + NEW, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens([prompt])
    generator.generate_next_token()
    with pytest.raises(Exception, match="cannot be partially rewound"):
        generator.rewind_to(2)
