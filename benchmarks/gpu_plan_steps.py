"""The GPU plan's steps that talk to the machine (benchmarks/gpu_plan.py): what it is, where
ONNX Runtime places each model's nodes, and the speed tables."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# dense float16 tensor-core peak of the GPUs this project has measured on (NVIDIA's data
# sheets, SXM, without sparsity), TFLOP/s
_PEAKS = {"H100": 989.4, "H200": 989.4, "A100": 312.0, "L4": 121.0}

# run in a fresh process per model shard: ONNX Runtime's verbose log goes to the process's
# stderr, which is redirected per model; torch first, so the CUDA libraries it ships load
_SCAN = r'''
import json, os, sys, tempfile
try:
    import torch  # noqa: F401
except ImportError:
    pass
import onnxruntime as ort
ort.set_default_logger_severity(0)
provider = sys.argv[1]
for path in sys.argv[2:]:
    so = ort.SessionOptions(); so.log_severity_level = 0; so.log_verbosity_level = 0
    fd, tmp = tempfile.mkstemp(); sys.stderr.flush(); saved = os.dup(2); os.dup2(fd, 2)
    error, providers = None, []
    try:
        chosen = ([("CUDAExecutionProvider", {"use_tf32": "0"})] if provider == "cuda" else [])
        s = ort.InferenceSession(path, so, providers=chosen + ["CPUExecutionProvider"])
        providers = s.get_providers(); del s
    except Exception as e:
        error = str(e).splitlines()[0][:300]
    finally:
        os.dup2(saved, 2); os.close(saved); os.close(fd)
    log = open(tmp, errors="replace").read(); os.remove(tmp)
    lines = [line for line in log.splitlines() if "kernel not found in registries" in line]
    print(json.dumps({"model": path, "providers": providers, "error": error, "log": lines}),
          flush=True)
'''


def not_found(lines: list[str]) -> set[str]:
    """The nodes ONNX Runtime's verbose log names as having no kernel on the provider, e.g.
    `... [I:onnxruntime:, cuda_execution_provider.cc:... GetCapability] CUDA kernel not found
    in registries for Op type: Elu node name: n20_Elu`."""
    return {m.group(1) for line in lines
            for m in [re.search(r"kernel not found in registries for Op type: \S+ node name: "
                                r"(\S*)", line)] if m}


def versions(provider: str) -> str:
    import onnxruntime as ort

    text = f"onnxruntime {ort.__version__} ({', '.join(ort.get_available_providers())})"
    if provider == "cuda":
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True)
        text += f"; {smi.stdout.strip()}"
    return text + f"; Python {sys.version.split()[0]}"


def scan(models: list[Path], provider: str, out: Path, jobs: int) -> list[dict]:
    """ONNX Runtime's placement of each model (its log's kernel-not-found nodes) beside the
    nodes attndsl's check names; the kernel keys seen go to OUT/placement-keys.json."""
    import onnx

    from attndsl.placement import check, node_keys

    shards = [models[i::jobs] for i in range(jobs) if models[i::jobs]]

    def one(shard):
        done = subprocess.run([sys.executable, "-c", _SCAN, provider, *map(str, shard)],
                              capture_output=True, text=True, timeout=1800)
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    with ThreadPoolExecutor(len(shards) or 1) as pool:
        rows = [row for rows in pool.map(one, shards) for row in rows]
    placed, missing, results = set(), set(), []
    for row in sorted(rows, key=lambda r: r["model"]):
        model = onnx.load(row["model"], load_external_data=False)
        logged = not_found(row["log"])
        have, lack = node_keys(model, logged)
        placed |= have
        missing |= lack
        predicted = {f.node.split(" (")[0] for f in check(model, provider).findings
                     if not f.rule}
        results.append({"model": str(Path(row["model"]).relative_to(out)), "logged": logged,
                        "predicted": predicted, "agrees": predicted == logged,
                        "error": row["error"]})
    write_keys(out / "placement-keys.json", placed, missing)
    return results


def write_keys(path: Path, placed: set, missing: set) -> None:
    """placement-keys.json (tools/kernel_tables.py measured reads it): the kernel keys of
    the nodes a provider took and of those it had no kernel for, a key a line, sorted (an op
    with no schema has no opset: -1 sorts it)."""
    def lines(keys) -> str:
        return ",\n".join(json.dumps([d, op, v, dict(b)]) for d, op, v, b in
                           sorted(keys, key=lambda k: (k[0], k[1], k[2] or -1, k[3])))
    path.write_text(f'{{"placed": [\n{lines(placed)}\n],\n"missing": [\n{lines(missing)}\n]}}\n')


def peak_tflops(provider: str) -> float | None:
    if provider != "cuda":
        return None
    import torch

    name = torch.cuda.get_device_name()
    return next((peak for gpu, peak in _PEAKS.items() if gpu in name), None)


def bench(provider: str, out: Path, dry: bool, peak: float | None) -> str:
    """Markdown: dense causal, full, GQA and windowed attention (benchmarks/gpu.attn) against
    torch SDPA, a block-sparse layer, and greedy decoding ms/token in float16 and int4."""
    cli = [sys.executable, "-m", "attndsl.cli"]
    lengths = "32" if dry else "1024,2048,4096,8192"
    dtype = "float32" if dry else "float16"
    target = "ort-cpu" if dry else "ort-cuda"
    parts = []
    layers = [("benchmarks/gpu.attn", "gpu_causal"), ("benchmarks/gpu.attn", "gpu_full"),
              ("benchmarks/gpu.attn", "gpu_gqa"), ("benchmarks/gpu.attn", "gpu_window"),
              ("examples/bigbird.attn", None)]
    for spec, name in [layers[0], layers[-1]] if dry else layers:  # dry: causal, block-sparse
        cmd = cli + ["bench", spec, "--providers", provider, "--dtype", dtype, "--batch",
                     "1" if dry else "4", "--lengths", lengths, "--targets", target,
                     "--markdown", "-q", "--repeat", "5"] + (["--name", name] if name else [])
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
        table = done.stdout.strip() or f"(bench failed: {done.stderr.strip()[-300:]})"
        parts.append(_with_peak(table, peak))
    parts.append(_decode(cli, provider, out, dry))
    return "\n\n".join(parts)


def _with_peak(table: str, peak: float | None) -> str:
    """The GFLOP/s column's share of the GPU's peak, as a note under the table."""
    if peak is None:
        return table
    rates = [float(x) for x in re.findall(r"\| ([0-9.]+) \| kernel", table)]
    if not rates:
        return table
    return table + f"\n\nbest {max(rates) / 1000:.1f} TFLOP/s = {max(rates) / 10 / peak:.1f}% " \
                   f"of the GPU's {peak:.0f} TFLOP/s dense float16 peak"


def _decode(cli: list[str], provider: str, out: Path, dry: bool) -> str:
    rows = ["| model | weights | ms/token | first token ms |", "|---|---|---|---|"]
    for quantize in ([], ["--quantize", "int4"]):
        folder = out / "decode" / ("int4" if quantize else "float16")
        dtype = "float32" if dry else "float16"
        made = subprocess.run([*cli, "compile", "examples/llama_lm.attn", "--export", "genai",
                               "--target", "ort-cpu" if dry else "ort-cuda", "--dtype", dtype,
                               "-q", "-o", str(folder), *quantize],
                              capture_output=True, text=True, cwd=ROOT)
        if made.returncode:
            rows.append(f"| llama_lm | {dtype} {' '.join(quantize)} | compile failed | |")
            continue
        ran = subprocess.run([*cli, "generate", str(folder / "llama_lm"), "--prompt-ids",
                              ",".join(["5"] * 16), "--max-new", "4" if dry else "64",
                              "--provider", provider, "--json", "-q"],
                             capture_output=True, text=True, cwd=ROOT)
        try:
            got = json.loads(ran.stdout)
            rows.append(f"| llama_lm | {dtype}{', int4' if quantize else ''} | "
                        f"{got['ms_per_token']:.2f} | {got['first_token_ms']:.1f} |")
        except ValueError:
            rows.append(f"| llama_lm | {dtype} | generate failed: {ran.stderr.strip()[-200:]} | |")
    return "\n".join(rows)
