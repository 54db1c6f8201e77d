"""The recurrent layers on ONNX Runtime's CUDA provider: the delta rule (Qwen3-Next, OLMo Hybrid),
Kimi delta attention (Kimi Linear, Ling 3), lightning attention (MiniMax) and Mamba2 (Mamba2,
Bamba, Granite 4, Nemotron-H, Falcon-H1) generating on a GPU.

  # here (CPU, transformers installed): tiny checkpoints from transformers' config classes,
  # their weights redrawn, transformers' greedy tokens for each prompt alone (its forward over
  # the whole prefix at each step, without its cache), and each one's decoding model compiled
  # for ort-cuda (the recurrence as com.microsoft.LinearAttention, where the CUDA table has its
  # kernel) and for portable (the chunked form in standard ops)
  .venv/bin/python tools/gpu_recurrent.py prepare gpu-recurrent
  # on the GPU machine (onnxruntime-gpu installed)
  python tools/gpu_recurrent.py run gpu-recurrent
  # on the GPU machine: com.microsoft.LinearAttention alone, each update rule attndsl emits,
  # in float32, float16 and bfloat16, its provider read from ONNX Runtime's profiler
  python tools/gpu_recurrent.py kernels gpu-recurrent
  # back here: the kernels found, into attndsl/placement/cuda-measured.json
  .venv/bin/python tools/kernel_tables.py measured --merge --keys \\
      gpu-recurrent/placement-keys.json --device "NVIDIA H100" --version 1.31.1

`run` creates each decoding model's session on the CUDA provider with ONNX Runtime's verbose
log, which names every node the provider has no kernel for (so whether LinearAttention runs on
CUDA is read, not assumed), then `attndsl generate --provider cuda` on a left-padded batch of
the prompts, and compares the tokens with transformers'. It prints a Markdown table
(BENCHMARKS.md)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TYPES = {"qwen3_next": True, "kimi_linear": False, "bailing_hybrid": False, "minimax": False,
         # Mamba2's mixers (alone, beside attention, in hybrids) and OLMo Hybrid's delta rule
         "mamba2": False, "bamba": False, "granitemoehybrid": False, "nemotron_h": False,
         "falcon_h1": False, "olmo_hybrid": False,
         # DeepSeek sparse attention: its indexer's keys a second cache, `gather` decoding
         "deepseek_v32": False,
         # Mamba's mixers (`gated` with a decay per key channel), alone and in Jamba
         "mamba": False, "falcon_mamba": False, "jamba": False}
PROMPTS = [[5, 7, 9, 11, 2, 3, 4], [8, 1, 3]]
NEW = 12
TARGETS = ("ort-cuda", "portable")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attndsl.cli", *args], capture_output=True,
                          text=True, cwd=ROOT)


def prepare(out: Path, types: list[str]) -> None:
    import torch
    import transformers as tf

    sys.path[:0] = [str(ROOT), str(ROOT / "tools")]
    from coverage_configs import tiny_config

    from tests.test_hf_families import CASES, redraw
    from tests.test_kimi_linear import _kimi, _ling

    small = {"kimi_linear": _kimi, "bailing_hybrid": _ling}  # tiny_config's keeps 256 experts
    small.update({name: CASES[name][0] for name in TYPES if name in CASES and name not in small
                  and name not in ("qwen3_next", "minimax")})  # the suite's tiny configs

    expected = {}
    for name, unit_offset in TYPES.items():
        if types and name not in types:
            continue
        folder = out / name / "hf"
        config = small[name]() if name in small else tiny_config(name)
        model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
        redraw(model, 11, unit_offset=unit_offset)
        model.save_pretrained(folder)
        want, cached = [], []
        for prompt in PROMPTS:  # each prompt alone (MiniMax's batched left padding differs)
            with torch.no_grad():
                ids = model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=NEW,
                                     do_sample=False, pad_token_id=0, eos_token_id=None)
                cached.append(ids[0, len(prompt):].tolist())
                ids = torch.tensor([prompt])  # the model's own forward over the whole prefix:
                for _ in range(NEW):  # transformers' one-token Mamba2 steps leave dt unclamped
                    step = model(input_ids=ids, use_cache=False).logits[0, -1].argmax()
                    ids = torch.cat([ids, step.view(1, 1)], 1)
            want.append(ids[0, len(prompt):].tolist())
        expected[name] = want
        if cached != want:
            print(f"{name}: transformers' cached generate gives {cached}", flush=True)
        spec = out / name / "model.attn"
        made = _cli("import", str(folder), "-o", str(spec))
        if made.returncode:
            sys.exit(f"{name}: import failed: {made.stderr}")
        for target in TARGETS:
            made = _cli("compile", str(spec), "--export", "onnx", "--decode", "--weights",
                        str(folder), "--target", target, "-q", "-o", str(out / name / target))
            if made.returncode:
                sys.exit(f"{name} {target}: compile failed: {made.stderr}")
        for f in folder.glob("*.safetensors"):  # the ONNX files carry the weights
            f.unlink()
        print(f"{name}: {want}", flush=True)
    (out / "expected.json").write_text(json.dumps(expected))


_LOG = r'''
import json, os, sys, tempfile
import torch  # noqa: F401  (the CUDA libraries it ships, loaded before onnxruntime)
import onnxruntime as ort
ort.set_default_logger_severity(0)
path = sys.argv[1]
so = ort.SessionOptions(); so.log_severity_level = 0
fd, tmp = tempfile.mkstemp(); sys.stderr.flush(); saved = os.dup(2); os.dup2(fd, 2)
try:
    s = ort.InferenceSession(path, so, providers=[("CUDAExecutionProvider", {"use_tf32": "0"}),
                                                  "CPUExecutionProvider"])
    providers = s.get_providers()
finally:
    os.dup2(saved, 2); os.close(saved); os.close(fd)
log = open(tmp, errors="replace").read(); os.remove(tmp)
print(json.dumps({"providers": providers,
                  "missing": sorted({l.split("Op type: ")[1].split(" node name")[0]
                                     for l in log.splitlines()
                                     if "kernel not found in registries" in l})}))
'''


def _one(out: Path, name: str, target: str, want: list) -> tuple[bool, str]:
    decoder = next((out / name / target).glob("*.decode.onnx"))
    placed = subprocess.run([sys.executable, "-c", _LOG, str(decoder)], capture_output=True,
                            text=True)
    try:
        seen = json.loads(placed.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        seen = {"providers": [], "missing": [f"session failed: {placed.stderr[-300:]}"]}
    argv = ["generate", str(decoder), "--max-new", str(NEW), "--provider", "cuda", "--json",
            "-q"]
    for prompt in PROMPTS:
        argv += ["--prompt-ids", ",".join(map(str, prompt))]
    made = _cli(*argv)
    try:
        got = json.loads(made.stdout)["tokens"]
        verdict = "identical" if got == want else f"DIFFER: {got} vs {want}"
    except (ValueError, KeyError):
        verdict = f"generate failed: {made.stderr.strip()[-300:]}"
    on_cuda = seen["providers"][:1] == ["CUDAExecutionProvider"]
    row = (f"| {name} | {target} | {', '.join(seen['missing']) or 'none'}"
           f"{'' if on_cuda else ' (CUDA did not load)'} | {verdict} |")
    return verdict == "identical" and on_cuda, row


def run(out: Path) -> int:
    from concurrent.futures import ThreadPoolExecutor

    expected = json.loads((out / "expected.json").read_text())
    jobs = [(name, target, want) for name, want in expected.items() for target in TARGETS]
    with ThreadPoolExecutor(len(jobs)) as pool:
        done = list(pool.map(lambda job: _one(out, *job), jobs))
    rows = ["| family | target | ops ONNX Runtime ran off CUDA | greedy tokens on CUDA |",
            "|---|---|---|---|"] + [row for _, row in done]
    (out / "generate.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0 if all(ok for ok, _ in done) else 1


# (update rule, decay per key channel): KDA, the delta rule, lightning (and Mamba2), Mamba
RULES = (("gated_delta", True), ("gated_delta", False), ("gated", False), ("gated", True))
ELEM = {"float32": 1, "float16": 10, "bfloat16": 16}


def _la_model(rule: str, channels: bool, dtype: str, state: str, B: int, L: int, H: int,
              d: int):
    from onnx import helper

    elem, s_elem = ELEM[dtype], ELEM[state]
    inputs = [helper.make_tensor_value_info(n, elem, [B, L, H * d]) for n in "qkv"]
    inputs.append(helper.make_tensor_value_info("past", s_elem, [B, H, d, d]))
    inputs.append(helper.make_tensor_value_info("decay", elem, [B, L, H * d if channels else H]))
    names = ["q", "k", "v", "past", "decay"]
    if rule == "gated_delta":
        inputs.append(helper.make_tensor_value_info("beta", elem, [B, L, H]))
        names.append("beta")
    node = helper.make_node("LinearAttention", names, ["y", "present"], domain="com.microsoft",
                            q_num_heads=H, kv_num_heads=H, update_rule=rule, scale=1.0)
    graph = helper.make_graph([node], "la", inputs, [
        helper.make_tensor_value_info("y", elem, [B, L, H * d]),
        helper.make_tensor_value_info("present", s_elem, [B, H, d, d])])
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)])


def kernels(out: Path) -> int:
    """Each (rule, dtype, state dtype) LinearAttention node alone on the CUDA provider: where
    the profiler says it ran, and its outputs against the CPU provider's float32 run of the
    same (rounded) inputs."""
    import numpy as np  # noqa: I001  (torch first: the CUDA libraries it ships)
    import torch
    import onnxruntime as ort

    sys.path.insert(0, str(ROOT))
    from attndsl.backends.runtime import placements

    code = {torch.float32: 1, torch.float16: 10, torch.bfloat16: 16}  # ONNX element types
    B, L, H, d = 2, 37, 4, 16
    rng = np.random.default_rng(0)
    rows = ["| rule | decay | dtype | state | ran on | max error vs CPU float32 |",
            "|---|---|---|---|---|---|"]
    placed, missing = [], []
    for rule, channels in RULES:
        q = rng.standard_normal((B, L, H * d)).astype(np.float32)
        k = rng.standard_normal((B, L, H, d))
        k = (k / np.linalg.norm(k, axis=-1, keepdims=True)).reshape(B, L, H * d)
        feed = {"q": q / np.sqrt(d), "k": k.astype(np.float32),
                "v": rng.standard_normal((B, L, H * d)).astype(np.float32),
                "past": 0.1 * rng.standard_normal((B, H, d, d)).astype(np.float32),
                "decay": -rng.uniform(0.01, 0.5, (B, L, H * d if channels else H))
                .astype(np.float32)}
        if rule == "gated_delta":
            feed["beta"] = rng.uniform(0.1, 0.9, (B, L, H)).astype(np.float32)
        for dtype in ELEM:
            for state in sorted({dtype, "float32"}):
                rounded = {n: torch.from_numpy(a).to(getattr(torch, dtype)).float().numpy()
                           if n != "past" or state == dtype else a for n, a in feed.items()}
                ref = ort.InferenceSession(
                    _la_model(rule, channels, "float32", "float32", B, L, H, d)
                    .SerializeToString(), providers=["CPUExecutionProvider"]).run(None, rounded)
                so = ort.SessionOptions()
                so.enable_profiling = True
                try:
                    sess = ort.InferenceSession(
                        _la_model(rule, channels, dtype, state, B, L, H, d).SerializeToString(),
                        so, providers=[("CUDAExecutionProvider", {"use_tf32": "0"}),
                                       "CPUExecutionProvider"])
                    ins = {}
                    for n, a in rounded.items():
                        t = torch.from_numpy(a).to(getattr(torch, state if n == "past" else dtype))
                        ins[n] = t.cuda().contiguous()
                    binding = sess.io_binding()
                    for n, t in ins.items():
                        binding.bind_input(n, "cuda", 0, code[t.dtype], list(t.shape),
                                           t.data_ptr())
                    ys = [torch.empty((B, L, H * d), dtype=ins["q"].dtype, device="cuda"),
                          torch.empty((B, H, d, d), dtype=ins["past"].dtype, device="cuda")]
                    for n, t in zip(("y", "present"), ys, strict=True):
                        binding.bind_output(n, "cuda", 0, code[t.dtype], list(t.shape),
                                            t.data_ptr())
                    sess.run_with_iobinding(binding)
                    ran = ", ".join(sorted(placements(sess).get("LinearAttention", {"?"})))
                    err = max(float(np.abs(y.float().cpu().numpy() - r).max())
                              for y, r in zip(ys, ref, strict=True))
                    cell = f"{err:.2e}"
                except Exception as exc:  # the row says what ONNX Runtime said
                    ran, cell = "-", f"failed: {str(exc).splitlines()[0][:160]}"
                key = ["com.microsoft", "LinearAttention", 1,
                       {"S": "float" if state == "float32" else state,
                        "T": "float" if dtype == "float32" else dtype}]
                if ran != "-":
                    (placed if ran == "CUDAExecutionProvider" else missing).append(key)
                rows.append(f"| {rule} | {'per key channel' if channels else 'per head'} | "
                            f"{dtype} | {state} | {ran} | {cell} |")
                print(rows[-1], flush=True)
    (out / "kernels.md").write_text("\n".join(rows) + "\n")
    # tools/kernel_tables.py measured --merge --keys reads it
    (out / "placement-keys.json").write_text(json.dumps({"placed": placed, "missing": missing}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("prepare", "run", "kernels"))
    p.add_argument("folder", type=Path)
    p.add_argument("--types", default="", help="prepare: these model types alone (a,b,...)")
    args = p.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    if args.step == "prepare":
        prepare(args.folder, [t for t in args.types.split(",") if t])
        return 0
    return run(args.folder) if args.step == "run" else kernels(args.folder)


if __name__ == "__main__":
    sys.exit(main())
