"""One regression test per defect found by trying attndsl as a new user would (random specs,
mutated files, hostile weights and command lines). Each failed before its fix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from safetensors.torch import save_file

import attndsl
from attndsl import targets
from attndsl.backends import reference, runtime
from attndsl.cli import main
from attndsl.errors import ExportError, SpecError
from attndsl.output import write_atomic
from attndsl.verify import tolerance

from .conftest import ROOT


def _spec(tmp_path: Path, body: str, name: str = "s.attn") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def _ort_matches_reference(text: str, feed: dict[str, np.ndarray],
                           targets: tuple[str, ...] = ("ort-cpu", "ort-cuda")) -> None:
    layer = attndsl.loads(text)["a"]
    module = layer.to_torch()
    state = {k: v.detach().double().numpy() for k, v in module.state_dict().items()}
    want = reference.run(layer.graph(), feed, state)
    for target in targets:
        got = runtime.run(runtime.make_session(layer.onnx_bytes(target=target)), feed)
        err = np.abs(got - want).max()
        assert err <= tolerance(want), f"{target}: off by {err}"


# 1. block-sparse cross attention with a random mask drew key blocks modulo the wrong count
def test_cross_random_mask_block_sparse_with_few_query_blocks() -> None:
    text = """attention a {
        d_model = 32
        heads = 2
        kind = cross
        mask = !global(first = 2) & random(blocks = 2, block = 17, seed = 682371) | prefix(24)
    }"""
    assert attndsl.loads(text)["a"].plan("ort-cpu")[1][0].strategy == "block_sparse"
    rng = np.random.default_rng(1)
    for L, S in ((16, 97), (23, 283), (64, 300)):
        _ort_matches_reference(text, {
            "x": rng.standard_normal((2, L, 32)).astype(np.float32),
            "memory": rng.standard_normal((2, S, 32)).astype(np.float32)})


# 2. values valid in float64 but not in float32 (goldens in tests/invalid cover the messages)
@pytest.mark.parametrize("entry", ["softcap = 1e39", "scale = 1e39",
                                   "position = rope(theta = 1e-300)", "dropout = 1e999"])
def test_values_float32_cannot_hold_are_refused(entry: str) -> None:
    with pytest.raises(SpecError):
        attndsl.loads(f"attention a {{ d_model = 16 heads = 2 {entry} }}")


# 3. NaN / inf in a weights file
def test_non_finite_weights_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path, "attention a { d_model = 16 heads = 2 bias = false }")
    tensors = {k: v.clone() for k, v in
               attndsl.load(spec)["a"].to_torch().state_dict().items()}
    tensors["k_proj.weight"][3, 4] = float("nan")
    tensors["o_proj.weight"][0, 0] = float("inf")
    save_file(tensors, str(tmp_path / "w.safetensors"))
    assert main(["compile", str(spec), "--export", "onnx", "-o", str(tmp_path / "out"),
                 "--weights", str(tmp_path / "w.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "`k_proj.weight` holds 1 NaN or infinite" in err
    assert "`o_proj.weight` holds 1 NaN or infinite" in err
    assert not (tmp_path / "out").exists()


# 4a. key lengths beyond 32 bits on the MultiHeadAttention path
def test_key_lengths_beyond_32_bits() -> None:
    text = "attention a { d_model = 32 heads = 2 mask = padding }"
    assert attndsl.loads(text)["a"].plan("ort-cpu")[1][0].strategy == "mha"
    # large inputs make the softmax peaked, so a row that wrongly sees no key (and the kernel's
    # uniform fallback) differs clearly from one that sees all of them
    x = 8 * np.random.default_rng(0).standard_normal((3, 9, 32)).astype(np.float32)
    _ort_matches_reference(text, {"x": x, "key_lengths": np.array([2**32 + 3, 2**31 + 5, 4])})


# 4b. run --inputs: float segment ids were truncated; a batch mismatch was accepted
@pytest.mark.parametrize(("arrays", "message"), [
    ({"segment_ids": np.zeros((2, 5), np.float32)}, "must hold integers"),
    ({"segment_ids": np.zeros((3, 5), np.int64)}, "must agree"),
    ({"segment_ids": np.zeros((2, 4), np.int64)}, "must agree"),
    ({"x": np.zeros((2, 5, 7), np.float32)}, "the model takes 32"),
    ({"x": np.zeros((2, 5), np.float32)}, "axes"),
])
def test_run_checks_given_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 arrays: dict, message: str) -> None:
    spec = _spec(tmp_path, "attention a { d_model = 32 heads = 2 mask = causal & document }")
    assert main(["compile", str(spec), "--export", "onnx", "-o", str(tmp_path)]) == 0
    feed = {"x": np.zeros((2, 5, 32), np.float32), "segment_ids": np.zeros((2, 5), np.int64)}
    np.savez(tmp_path / "in.npz", **(feed | arrays))
    capsys.readouterr()
    assert main(["run", str(tmp_path / "a.onnx"), "--inputs", str(tmp_path / "in.npz")]) == 2
    assert message in capsys.readouterr().err


# 5. "did you mean" hints: right or absent
def _hint_for(err: str, name: str) -> str | None:
    block = err.split(f"unknown tensor `{name}`", 1)[1].split("error:", 1)[0]
    return block.split("did you mean `", 1)[1].split("`", 1)[0] if "did you mean" in block \
        else None


def test_weight_hints_are_right_or_absent(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path, """attention a { d_model = 16 heads = 2 bias = false }
        transformer t { attention = a layers = 2 ffn = swiglu(32) norm = rmsnorm(pre) }""")
    module = attndsl.load(spec)["t"].to_torch(seed=3)
    state = module.state_dict()
    hf = {}  # a Hugging Face Llama checkpoint's names for the same tensors
    for name, value in state.items():
        name = name.replace("attn_norm", "input_layernorm").replace(
            "ffn_norm", "post_attention_layernorm")
        hf["model." + name] = value.clone()
    save_file(hf, str(tmp_path / "w.safetensors"))
    assert main(["compile", str(spec), "--name", "t", "--export", "onnx", "-o",
                 str(tmp_path / "out"), "--weights", str(tmp_path / "w.safetensors")]) == 2
    err = capsys.readouterr().err
    renamed = {}
    for name in hf:
        hint = _hint_for(err, name)
        if "layernorm" in name or name == "model.norm.weight":
            assert hint is None or hint == name.removeprefix("model."), (name, hint)
        else:
            assert hint == name.removeprefix("model."), (name, hint)
        renamed[hint or name] = hf[name]
    # following every hint gives the right tensors wherever a hint was given
    for name, value in renamed.items():
        if name in state:
            assert torch.equal(value, state[name])


def test_projection_hints_of_one_shape_are_absent(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path, "attention a { d_model = 16 heads = 2 bias = false }")
    t5 = {f"{p}.weight": torch.zeros(16, 16) for p in ("q", "k", "v", "o")}  # T5's names
    save_file(t5, str(tmp_path / "w.safetensors"))
    assert main(["compile", str(spec), "--export", "onnx", "-o", str(tmp_path / "out"),
                 "--weights", str(tmp_path / "w.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "did you mean" not in err


# 6. the ort-* plans rely on one onnxruntime release's kernels
def test_other_onnxruntime_releases_are_refused() -> None:
    targets.check_ort_version("ort-cpu", "1.31.1")
    targets.check_ort_version("portable", "1.22.0")
    with pytest.raises(ExportError, match=r"verified for onnxruntime 1\.31"):
        targets.check_ort_version("ort-cuda", "1.30.0")
    model = onnx.load_from_string(
        attndsl.loads("attention a { d_model = 16 heads = 2 }")["a"].onnx_bytes())
    props = {p.key: p.value for p in model.metadata_props}
    assert props["attndsl.onnxruntime"] == "1.31"


# 7. bare prefix / global / random masks crashed the planner
@pytest.mark.parametrize("mask", ["prefix(3)", "global(first = 2)", "!prefix(3)",
                                  "random(blocks = 2, block = 4)", "!global(tokens = [1])",
                                  "!random(blocks = 1, block = 5, seed = 9)"])
def test_bare_global_masks_plan_and_match(mask: str) -> None:
    text = f"attention a {{ d_model = 16 heads = 2 mask = {mask} }}"
    x = np.random.default_rng(0).standard_normal((2, 11, 16)).astype(np.float32)
    _ort_matches_reference(text, {"x": x})


# 8. causal with head_dim not a multiple of 8 was planned onto GroupQueryAttention
def test_gqa_is_planned_only_where_its_kernel_runs() -> None:
    text = "attention a { d_model = 36 heads = 3 mask = causal }"
    choice = attndsl.loads(text)["a"].plan("ort-cpu")[1][0]
    assert choice.strategy != "gqa" and "multiple of 8" in choice.text()
    x = np.random.default_rng(0).standard_normal((2, 10, 36)).astype(np.float32)
    _ort_matches_reference(text, {"x": x})


# 9. long flat chains raised RecursionError everywhere
@pytest.mark.parametrize("body", [
    "attention a { d_model = 8 heads = 1 mask = " + " | ".join(["causal"] * 500) + " }",
    "attention a { d_model = 8 heads = 1 mask = " + " & ".join(["full"] * 500) + " }",
    "let N = " + " + ".join(["1"] * 1000) + "\nattention a { d_model = N heads = 1 }",
])
def test_long_chains_are_diagnosed(tmp_path: Path, body: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SpecError, match="nested more than 64"):
        attndsl.loads(body)
    spec = _spec(tmp_path, body)
    for argv in (["check", str(spec)], ["fmt", "--check", str(spec)], ["show", str(spec)],
                 ["compile", str(spec), "--export", "onnx", "-o", str(tmp_path / "o")]):
        assert main(argv) == 2, argv
        assert "nested more than 64" in capsys.readouterr().err


# 10. sizes that exhausted memory or hung: planning follows what can exist, not a parameter
@pytest.mark.parametrize("mask", ["window(left = 10000000)", "prefix(1000000000000000000) | "
                                  "window(1)", "chunked(100000000)",
                                  "causal & window(left = 4611686018427387904, right = 0)",
                                  "global(first = 1000000000000)",
                                  "random(blocks = 3, block = 4611686018427387904, seed = 5)",
                                  "window(3) sparsity = block(4611686018427387904)"])
def test_huge_mask_parameters_plan_quickly(mask: str) -> None:
    layer = attndsl.loads(f"attention a {{ d_model = 16 heads = 2 mask = {mask} }}")["a"]
    start = time.perf_counter()
    data = layer.onnx_bytes()
    assert time.perf_counter() - start < 20 and len(data) < 1_000_000
    x = np.random.default_rng(0).standard_normal((2, 9, 16)).astype(np.float32)
    _ort_matches_reference(f"attention a {{ d_model = 16 heads = 2 mask = {mask} }}", {"x": x})


def test_huge_random_draws_and_show_lengths_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SpecError, match="at most 64"):
        attndsl.loads("attention a { d_model = 8 heads = 1 "
                      "mask = random(blocks = 100000000, block = 4) }")
    spec = _spec(tmp_path, "attention a { d_model = 8 heads = 1 }")
    assert main(["show", str(spec), "--length", "100000"]) == 2
    assert "[1, 2048]" in capsys.readouterr().err


# 11. numeric command-line arguments, pipes, folders
@pytest.mark.parametrize("argv", [
    ["run", "M", "--length", "0"], ["run", "M", "--length", "-5"],
    ["run", "M", "--length", "1000000000"], ["run", "M", "--batch", "0"],
    ["run", "M", "--length", "1048576", "--batch", "65536"],
    ["compile", "S", "--export", "onnx", "--seed", str(2**70)],
    ["verify", "S", "--lengths", "10000000"], ["verify", "S", "--batches", "0"],
    ["bench", "S", "--repeat", "2"], ["bench", "S", "--lengths", "0"],
    ["show", "S", "--memory-length", "0"],
    ["compile", "S", "--export", "onnx", "--weights", "DIR"],
    ["verify", "S", "--save-inputs", "DIR"], ["verify", "S", "--save-outputs", "DIR"],
])
def test_bad_numbers_and_paths_are_usage_errors(tmp_path: Path, argv: list[str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path, "attention a { d_model = 8 heads = 1 }")
    assert main(["compile", str(spec), "--export", "onnx", "-o", str(tmp_path)]) == 0
    (tmp_path / "dir").mkdir()
    table = {"M": str(tmp_path / "a.onnx"), "S": str(spec), "DIR": str(tmp_path / "dir")}
    capsys.readouterr()
    start = time.perf_counter()
    assert main([table.get(a, a) for a in argv]) == 2
    assert time.perf_counter() - start < 10  # refused up front, not after the run
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "internal error" not in err


def test_a_closed_pipe_is_not_an_error() -> None:
    proc = subprocess.run(f"{sys.executable} -m attndsl.cli explain examples/llama_gqa.attn "
                          "| head -3", shell=True, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert len(proc.stdout.splitlines()) == 3
    assert "Error" not in proc.stderr and "internal error" not in proc.stderr


# 12. reading without limit
def test_check_reads_at_most_a_spec_size() -> None:
    proc = subprocess.run([sys.executable, "-m", "attndsl.cli", "check", "/dev/zero"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "larger than 1,048,576 bytes" in proc.stderr


# 13. compile held the weights about 7 times over
def test_compile_peak_memory_is_about_twice_the_model(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "attention big { d_model = 2048 heads = 16 mask = causal }")
    probe = ("import resource, sys\nfrom attndsl.cli import main\n"
             "import attndsl, torch, onnx, onnxruntime\n"
             "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
             f"assert main(['compile', {str(spec)!r}, '--export', 'onnx', '-o', "
             f"{str(tmp_path / 'out')!r}]) == 0\n"
             "print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, check=True)
    before, after = (int(v) * 1024 for v in proc.stdout.split()[-2:])
    size = (tmp_path / "out" / "big.onnx").stat().st_size  # 67 MB of float32 weights
    assert after - before < 3.5 * size, f"peak grew by {(after - before) / size:.1f}x the model"


# 14. atomic outputs
def test_a_failing_second_output_writes_nothing(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    (out / "llama_decoder.onnx").mkdir(parents=True)  # the second output cannot be written
    assert main(["compile", "examples/llama_gqa.attn", "--export", "onnx", "-o", str(out)]) == 2
    assert sorted(p.name for p in out.iterdir()) == ["llama_decoder.onnx"]
    fresh = tmp_path / "a" / "b"
    assert main(["compile", "examples/llama_gqa.attn", "--export", "onnx", "-o", str(fresh),
                 "--name", "nope"]) == 2
    assert not (tmp_path / "a").exists()


def test_a_failing_compile_creates_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    real = attndsl.Layer.onnx_model

    def failing(self, **kwargs):
        if self.name == "llama_decoder":
            raise ExportError("simulated exporter failure")
        return real(self, **kwargs)

    monkeypatch.setattr(attndsl.Layer, "onnx_model", failing)
    fresh = tmp_path / "new" / "folder"
    assert main(["compile", "examples/llama_gqa.attn", "--export", "onnx", "-o", str(fresh)]) == 3
    assert not (tmp_path / "new").exists()


_KILLED_WRITE = """
import os, signal, sys
from pathlib import Path
import attndsl.output as out
if sys.argv[2] == "named":
    del os.O_TMPFILE  # the fallback: a named temporary beside the target
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
out.write_atomic(Path(sys.argv[1]), b"new" * 1000)
"""


@pytest.mark.parametrize("mode", ["unnamed", "named"])
def test_kill_9_during_a_write_leaves_nothing_behind(tmp_path: Path, mode: str) -> None:
    target = tmp_path / "m.onnx"
    target.write_bytes(b"good")
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITE, str(target), mode], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert target.read_bytes() == b"good"
    if mode == "named":  # a killed writer's temporary is removed by the next write
        write_atomic(target, b"next")
        assert target.read_bytes() == b"next"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


# 15. fmt through a symbolic link
def test_fmt_writes_through_a_symlink(tmp_path: Path) -> None:
    real = _spec(tmp_path, "attention a {d_model=8 heads=1}\n", "real.attn")
    link = tmp_path / "link.attn"
    link.symlink_to(real)
    assert main(["fmt", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "attention a {\n    d_model = 8\n    heads   = 1\n}\n"


# 16. the bytes depended on how the spec path was typed
def test_output_does_not_depend_on_the_spec_path(tmp_path: Path) -> None:
    outputs = []
    for i, spelling in enumerate(["examples/prefix_lm.attn", "./examples/prefix_lm.attn",
                                  str(ROOT / "examples" / "prefix_lm.attn")]):
        assert main(["compile", spelling, "--export", "onnx", "-o", str(tmp_path / str(i))]) == 0
        outputs.append((tmp_path / str(i) / "prefix_lm.onnx").read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    assert str(ROOT).encode() not in outputs[2]


# 17. the portable export lost an RMSNorm eps of 1e-12 (the exporter's optimizer merged it with
# a 0.0 initializer), so a row with no visible key gave NaN after a sandwich norm
def test_portable_keeps_a_tiny_norm_eps() -> None:
    import numpy as np


    layer = attndsl.loads("""
attention a {
    d_model = 48
    heads = 8
    mask = !causal
}
transformer t {
    attention = a
    layers = 1
    ffn = relu(8)
    norm = rmsnorm(sandwich, eps = 1e-12)
}
""")["t"]
    x = np.random.default_rng(0).standard_normal((2, 1, 48)).astype(np.float32)  # no key
    state = {k: v.double().numpy() for k, v in layer.to_torch(seed=0).state_dict().items()}
    want = layer.reference({"x": x}, state)
    got = runtime.run(runtime.make_session(layer.onnx_bytes(target="portable")), {"x": x})
    assert np.isfinite(got).all() and np.abs(got - want).max() < 1e-4


# 18. causal linear attention in chunks assumed one sequence: cross attention's memory (S rows,
# not L) was cut into the queries' chunks and ONNX Runtime failed at the reshape
def test_cross_attention_causal_linear_kernel_runs_on_ort() -> None:
    text = """attention a {
        d_model = 44
        heads = 2
        kv_heads = 1
        head_dim = 12
        kind = cross
        memory_dim = 20
        kernel = linear(feature = softmax)
        mask = causal
    }"""
    rng = np.random.default_rng(0)
    for L, S in ((70, 23), (5, 130), (64, 64)):
        feed = {"x": rng.standard_normal((2, L, 44)).astype(np.float32),
                "memory": rng.standard_normal((2, S, 20)).astype(np.float32)}
        _ort_matches_reference(text, feed)


@pytest.mark.parametrize(("layers", "d_model", "ok"), [
    (4096, 64, True), (4096, 8192, False), (1_000_000, 64, False), (2**31 - 1, 64, False)])
def test_check_counts_a_stack_without_expanding_it(layers: int, d_model: int, ok: bool) -> None:
    """`layers = 1000000` took minutes and gigabytes: the stack was expanded block by block
    before its size was known. Now the count is arithmetic (a pattern's blocks, times the
    layers) and the cap refuses within a fraction of a second."""
    import time

    text = (f"attention a {{\n    d_model = {d_model}\n    heads = 4\n}}\n"
            f"transformer t {{\n    attention = a\n    layers = {layers}\n    ffn = gelu(256)\n"
            "    norm = layernorm(pre)\n}\n")
    start = time.process_time()
    try:
        attndsl.loads(text)
        passed = True
    except attndsl.SpecError:
        passed = False
    assert passed is ok
    assert time.process_time() - start < 2.0


def test_verify_chooses_lengths_quickly_whatever_the_window() -> None:
    """A window of 10^15 keys made verify's length choice search primes near 10^15 (seconds;
    minutes at 10^18): lengths no model can take (past MAX_LENGTH) are not chosen."""
    from attndsl.spec import MAX_LENGTH
    from attndsl.verify import default_lengths

    layer = attndsl.loads("attention a {\n    d_model = 64\n    heads = 4\n    mask = causal & "
                          "window(left = 1000000000000000000, right = 0)\n}\n")["a"]
    start = time.process_time()
    chosen = default_lengths(layer.spec)
    assert time.process_time() - start < 1.0
    assert max(chosen) <= MAX_LENGTH and 1 in chosen


def test_a_mixture_of_experts_prompt_sums_each_tokens_experts_exactly_on_two_threads() -> None:
    """The graph form of a mixture added each token's routed rows with a ScatterND of
    reduction `add`, whose duplicate indices ONNX Runtime's CPU kernel adds from several
    threads at once: a prompt of many tokens came out differently from run to run (rows off
    by 0.1 to 0.4). Now each token's k rows are summed by a reduction: every run equals the
    reference."""
    import onnxruntime as ort

    from attndsl.ir import build

    layer = attndsl.load(ROOT / "examples" / "deepseek_mla.attn")["deepseek_lm"]
    ids = np.random.default_rng(0).integers(0, 500, (3, 293)).astype(np.int64)
    weights = {k: v.detach().double().numpy() for k, v in layer.to_torch(seed=0).state_dict()
               .items()}
    want = reference.run(build(layer.spec), {"input_ids": ids}, weights)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(layer.onnx_bytes(target="ort-cpu"), options,
                                   providers=["CPUExecutionProvider"])
    for _ in range(4):
        got = session.run(None, {"input_ids": ids})[0]
        assert float(np.abs(got - want).max()) <= tolerance(want)


def test_q_k_v_are_packed_in_order_for_grouped_query_attention() -> None:
    """The q, k and v projections were stacked q|v|k (their order in the IR since LSH needs no
    k), so GroupQueryAttention never took its packed input and in-kernel rotary: every
    decoding model ran separate projections and standard-ops RoPE (found measuring int4
    decode against onnxruntime-genai's builder). The packed path is taken again."""
    layer = attndsl.load(ROOT / "examples" / "llama_lm.attn")["llama_lm"]
    model = onnx.load_from_string(layer.decoder_bytes(target="ort-cpu"))
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert gqa and all(n.input[1] == "" and n.input[2] == "" for n in gqa)  # packed q|k|v
    assert all(any(a.name == "do_rotary" and a.i == 1 for a in n.attribute) for n in gqa)


def test_a_genai_folder_refuses_sequences_past_its_context(tmp_path, capsys) -> None:
    """A genai folder's rotary tables are constants of its context length (folded at session
    start); `attndsl generate` and `run` asked for more refuse with the reason (exit 2), not
    an "internal error" from GroupQueryAttention's cos_cache check."""
    from attndsl.cli import main

    assert main(["compile", str(ROOT / "examples" / "llama_lm.attn"), "--export", "genai",
                 "--context-length", "16", "-o", str(tmp_path)]) == 0
    folder = str(tmp_path / "llama_lm")
    capsys.readouterr()
    assert main(["generate", folder, "--prompt-ids", "1,2,3", "--max-new", "30"]) == 2
    assert "at most 16 tokens" in capsys.readouterr().err
    assert main(["generate", folder, "--prompt-ids", "1,2,3", "--max-new", "14"]) == 0
    assert main(["run", f"{folder}/model.onnx", "--length", "20"]) == 2
    assert "at most 16 tokens" in capsys.readouterr().err
    assert main(["compile", str(ROOT / "examples" / "llama_lm.attn"), "--export", "onnx",
                 "--decode", "--context-length", "16", "-o", str(tmp_path)]) == 0
    capsys.readouterr()
    decoder = str(tmp_path / "llama_lm.decode.onnx")
    assert main(["generate", decoder, "--prompt-ids", "1,2,3", "--max-new", "30"]) == 2
    assert "at most 16 tokens" in capsys.readouterr().err


def test_a_mask_parameter_near_two_to_the_62_decodes(tmp_path, capsys) -> None:
    """`compile --decode` of a mask with a valid but huge parameter (`!prefix(2^62)`, found
    by the random-spec round trip of the IR text) printed "internal error: OverflowError":
    the decodability search allocated positions up to the parameter."""
    from attndsl.cli import main

    spec = tmp_path / "huge.attn"
    spec.write_text("attention a {\n    d_model = 16\n    heads = 2\n"
                    "    mask = causal & !prefix(4611686018427387904)\n}\n")
    assert main(["compile", str(spec), "--export", "onnx", "--decode", "-q",
                 "-o", str(tmp_path)]) == 0, capsys.readouterr().err
    assert (tmp_path / "a.decode.onnx").exists()


def test_a_linformer_cross_attention_decodes_over_its_rows(tmp_path, capsys) -> None:
    """Decoding a Linformer cross attention crashed with KeyError: Op.SCORES once Linformer
    became a kernel module: the decoding planner took every kernel module's core for a node of
    its own and left the softmax over Linformer's rows unfused. It is the dense form over the
    rows, as before, and its step matches the one-pass oracle."""
    import attndsl
    from attndsl.ir import build
    from attndsl.planner import plan

    from .test_decoding import _check_decoding

    text = ("attention a {\n    d_model = 32\n    heads = 2\n    kind = cross\n"
            "    memory_dim = 24\n    kernel = linformer(k = 8, max_len = 256)\n}\n")
    layer = attndsl.loads(text)["a"]
    _, choices = plan(build(layer.spec, decode=True), "ort-cpu", "float32")
    assert [c.strategy for c in choices] == ["dense"]
    _check_decoding(layer)  # prefill and steps on every backend and target = the oracle


def test_a_kernel_module_no_strategy_plans_keeps_its_own_node(monkeypatch) -> None:
    """A kernel module is found by its presence; where no strategy plans its kernel, its own
    `kernel` node stays (its module computes it) instead of being fused as a softmax core by
    the first strategy that matches the core's shapes."""
    import attndsl
    from attndsl import strategies
    from attndsl.ir import Op, build
    from attndsl.planner import plan

    monkeypatch.setattr(strategies, "LADDER",
                        tuple(s for s in strategies.LADDER if s.name != "linear"))
    layer = attndsl.loads("attention a {\n    d_model = 32\n    heads = 4\n    kv_heads = 2\n"
                          "    mask = causal\n    kernel = linear(feature = elu)\n}\n")["a"]
    graph, choices = plan(build(layer.spec), "ort-cpu", "float32")
    assert [c.strategy for c in choices] == ["linear"]
    assert not [n for n in graph.nodes if n.op is Op.ATTENTION]
    assert [n.attr("kernel") for n in graph.nodes if n.op is Op.KERNEL] == ["linear"]


def test_a_stack_shares_a_layerwise_linformer_held_by_a_by_length_variant() -> None:
    """A layerwise Linformer in a by_length variant passed `check` beside an attention without
    one, then failed at build ("internal error": its E not in the weight table): the stack
    check read each attention's own kernel, never its variants'. Now that stack is refused
    with a located diagnostic (tests/invalid/linformer_layerwise_variant), and a stack whose
    attentions share it through their variants builds and matches the oracle."""
    import attndsl

    text = ("attention mixed {\n    d_model = 32\n    heads = 2\n    by_length = [up_to(16), "
            "otherwise(kernel = linformer(k = 4, max_len = 64, share = layerwise))]\n}\n"
            "transformer t {\n    layers = 2\n    attention = [mixed, mixed]\n"
            "    ffn = swiglu(hidden = 64)\n    norm = rmsnorm(placement = pre)\n}\n")
    layer = attndsl.loads(text)["t"]
    report = layer.verify(lengths={7: "the first variant", 20: "the Linformer"}, batches=(2,))
    assert report.passed, report.text()
