"""Peak memory and time of exporting a checkpoint: `attndsl compile --weights HF --export genai`
(streamed: each tensor read, written and dropped) against onnxruntime-genai's model builder
(`python -m onnxruntime_genai.models.builder -i HF -o OUT -p fp32 -e cpu`) on the same
folder, both writing an fp32 onnxruntime-genai folder for the CPU. Each runs in a child
process; its peak resident memory is the kernel's (`os.wait4`: ru_maxrss of that child
alone), its time the wall clock (the checkpoint read once before, so that neither reads it
from disk). Nothing downloads: the checkpoint is a folder on disk (`benchmarks/make_llama.py`
writes a random one).

    .venv/bin/python benchmarks/make_llama.py /tmp/llama1b --hidden 2048 --layers 22 \\
        --heads 32 --kv-heads 4 --intermediate 5632 --vocab 32000 --context 2048
    .venv/bin/python benchmarks/export_memory.py /tmp/llama1b [--out /tmp/export-memory] \\
        [--attndsl-path OTHER_TREE] [--no-builder]

`--attndsl-path` adds a row for another attndsl source tree (an older commit: PYTHONPATH).
Prints a Markdown table (BENCHMARKS.md, Export memory)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def measure(command: list[str], env: dict[str, str] | None,
            cwd: Path) -> tuple[float, float, int]:
    """(peak resident GiB of the child, wall seconds, exit status). Run in `cwd`, out of the
    source tree: `python -m` puts its folder first on the import path."""
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.stderr.write(child.stderr.read().decode(errors="replace")[-2000:])
    child.returncode = code  # reaped by wait4: Popen must not wait for it again
    child.stderr.close()
    return usage.ru_maxrss / 2**20, wall, code  # ru_maxrss: KiB on Linux


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def largest_tensor(folder: Path) -> int:
    """Bytes of the checkpoint's largest tensor, from the safetensors headers."""
    largest = 0
    for file in folder.glob("*.safetensors"):
        with open(file, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        for name, entry in header.items():
            if name != "__metadata__":
                begin, end = entry["data_offsets"]
                largest = max(largest, end - begin)
    return largest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", type=Path, help="a Hugging Face Llama folder")
    p.add_argument("--out", type=Path, default=Path("/tmp/export-memory"))
    p.add_argument("--attndsl-path", default=None,
                   help="also run the attndsl source tree at this path (an older commit)")
    p.add_argument("--no-builder", action="store_true", help="leave out the model builder")
    args = p.parse_args()
    folder, out = args.checkpoint.resolve(), args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    attndsl = [sys.executable, "-m", "attndsl.cli"]
    spec = out / "model.attn"
    subprocess.run([*attndsl, "import", str(folder), "-o", str(spec)], check=True,
                   capture_output=True, cwd=out)
    weights = size_of(folder)
    runs = [("attndsl compile --export genai (streamed)", None,
             [*attndsl, "compile", str(spec), "--weights", str(folder), "--export", "genai",
              "-q", "-o", str(out / "attndsl")], out / "attndsl")]
    if args.attndsl_path:
        env = dict(os.environ, PYTHONPATH=args.attndsl_path)
        runs.append((f"attndsl from {args.attndsl_path}", env,
                     [*attndsl, "compile", str(spec), "--weights", str(folder), "--export",
                      "genai", "-q", "-o", str(out / "other")], out / "other"))
    if not args.no_builder:
        runs.append(("onnxruntime-genai builder -p fp32 -e cpu", None,
                     [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i",
                      str(folder), "-o", str(out / "builder"), "-p", "fp32", "-e", "cpu",
                      "-c", str(out / "cache")], out / "builder"))
    for file in folder.iterdir():  # into the page cache: neither run reads it cold
        with open(file, "rb") as f:
            while f.read(1 << 24):
                pass
    print(f"checkpoint {folder}: {weights / 1e9:.2f} GB of weights, largest tensor "
          f"{largest_tensor(folder) / 1e6:.0f} MB; {os.cpu_count()} cores\n")
    print("| export | peak RSS | x weights | wall | output |")
    print("|---|---|---|---|---|")
    for what, env, command, written in runs:
        peak, wall, code = measure(command, env, out)
        if code != 0:
            print(f"| {what} | failed (exit {code}) | | | |")
            continue
        print(f"| {what} | {peak:.2f} GiB | {peak * 2**30 / weights:.2f} | {wall:.0f} s | "
              f"{size_of(written) / 1e9:.2f} GB |", flush=True)
        shutil.rmtree(written, ignore_errors=True)  # the disk holds one output at a time


if __name__ == "__main__":
    main()
