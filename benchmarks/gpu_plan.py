"""The GPU plan, one command. On a machine with an NVIDIA GPU, from the repository root:

    python benchmarks/gpu_plan.py --out gpu-results --write-benchmarks

1. installs the `gpu` extra (`pip install -c constraints.txt -e .[gpu]`; --no-install skips);
2. compiles every example and the families' imports (tiny checkpoints from transformers'
   config classes, where transformers is installed) for ort-cuda: float16, bfloat16,
   float32, the decoding form in float16, int4 weights;
3. scans where ONNX Runtime places each model's nodes (its verbose log names every node its
   CUDA provider has no kernel for) against attndsl's placement check, and writes the kernel
   keys it saw (`placement-keys.json`, for tools/kernel_tables.py measured);
4. verifies every spec on CUDA (`attndsl verify --providers cuda --targets ort-cuda`: the
   oracle's comparison, and ONNX Runtime's profiler confirming every heavy node ran on CUDA);
5. benchmarks dense causal attention against torch SDPA, windowed and block-sparse attention,
   and decoding ms/token in float16 and int4, with TFLOP/s against the GPU's peak;
6. writes OUT/cuda.md, and with --write-benchmarks BENCHMARKS.md's generated CUDA section.

--dry-run runs every step on the CPU provider instead (no CUDA session, bfloat16 compiled but
not run, short lengths): what a machine without a GPU can check, and tests/test_gpu_plan.py
does."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools"), str(ROOT / "benchmarks")]

from gpu_plan_steps import bench, peak_tflops, scan, versions  # noqa: E402

VARIANTS = {"f16": ["--dtype", "float16"], "bf16": ["--dtype", "bfloat16"],
            "f32": ["--dtype", "float32"], "dec-f16": ["--dtype", "float16", "--decode"],
            "int4-f16": ["--dtype", "float16", "--quantize", "int4"]}
BEGIN, END = "<!-- gpu-plan:begin -->", "<!-- gpu-plan:end -->"


def _run(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int, str]:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env=env)
        return done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f} s"


def family_specs(out: Path, types: list[str] | None) -> list[Path]:
    """Each family's spec from a tiny config of its class (the coverage table's exact types
    by default); none without transformers."""
    try:
        from coverage import read_table
        from coverage_configs import tiny_config

        from attndsl.hf_import import import_config
    except ImportError:
        print("transformers is not installed: no families", file=sys.stderr)
        return []
    import tempfile

    table = read_table(ROOT / "docs" / "CHECKPOINTS.md")
    names = types if types is not None else [t for t, r in table.items()
                                             if r["status"] == "exact"]
    specs = []
    for name in names:
        with tempfile.TemporaryDirectory() as folder:
            tiny_config(name).save_pretrained(folder)
            text = import_config(Path(folder), "right", "auto")
        path = out / f"family_{name.replace('-', '_')}.attn"
        path.write_text(text)
        specs.append(path)
    return specs


def compile_all(specs: list[Path], models: Path, jobs: int) -> list[dict]:
    def one(job):
        spec, tag = job
        code, text = _run([sys.executable, "-m", "attndsl.cli", "compile", str(spec), "--export",
                           "onnx", "--target", "ort-cuda", "-q", "-o",
                           str(models / f"{spec.stem}__{tag}"), *VARIANTS[tag]], 600,
                          # built whatever the placement check says: the scan measures it
                          {**os.environ, "ATTNDSL_PLACEMENT": "report"})
        return {"spec": spec.stem, "variant": tag, "exit": code,
                "note": "" if code == 0 else text.strip().splitlines()[-1][:300]}
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(one, [(s, t) for s in specs for t in VARIANTS]))


def verify_all(specs: list[Path], dtypes: list[str], provider: str, lengths: str | None,
               jobs: int) -> list[dict]:
    def one(job):
        spec, dtype = job
        cmd = [sys.executable, "-m", "attndsl.cli", "verify", str(spec), "--providers", provider,
               "--dtype", dtype, "--targets", "ort-cuda", "--json", "-q"]
        code, text = _run(cmd + (["--lengths", lengths] if lengths else []), 900)
        worst = None
        try:  # stdout's JSON: a report per layer, each comparison's error and tolerance
            layers = json.JSONDecoder().raw_decode(text[text.index("["):])[0]
            worst = max((c["max_abs"] / c["tolerance"] for layer in layers
                         for c in layer["comparisons"] if c.get("kind") == "compared"),
                        default=None)
        except (ValueError, KeyError, TypeError):
            pass
        last = text.strip().splitlines()[-1] if text.strip() else ""
        return {"spec": spec.stem, "dtype": dtype, "exit": code, "worst": worst,
                "note": "" if code == 0 else last[:300]}
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(one, [(s, d) for d in dtypes for s in specs]))


def report(out: Path, facts: dict) -> str:
    lines = [f"Machine: {facts['versions']}", ""]
    placement = facts["placement"]
    agree = sum(r["agrees"] for r in placement)
    lines += ["### Placement: ONNX Runtime's own log against attndsl's check", "",
              f"{len(placement)} models scanned on {facts['provider']}; the check named exactly "
              f"the nodes ONNX Runtime logged as having no kernel in {agree} of them.", ""]
    for r in placement:
        if not r["agrees"]:
            lines.append(f"- {r['model']}: ONNX Runtime {sorted(r['logged'])}, the check "
                         f"{sorted(r['predicted'])}")
    compiled = facts["compile"]
    refused = [c for c in compiled if c["exit"]]
    lines += ["", f"Compiled {len(compiled) - len(refused)} of {len(compiled)} (spec, variant) "
              "pairs; the rest refused with a diagnostic (decoding a mask that cannot decode, "
              "and the like):", ""]
    lines += [f"- {c['spec']} {c['variant']}: {c['note']}" for c in refused]
    lines += ["", f"### Verify on {facts['provider']} (target ort-cuda)", "",
              "| spec | dtype | verdict | worst error / tolerance |", "|---|---|---|---|"]
    for v in facts["verify"]:
        verdict = "pass" if v["exit"] == 0 else ("timed out" if v["exit"] == 124 else "FAIL")
        worst = "-" if v["worst"] is None else f"{v['worst']:.3f}"
        lines.append(f"| {v['spec']} | {v['dtype']} | {verdict} | {worst} |")
    if facts.get("bench"):
        lines += ["", "### Speed", "", facts["bench"]]
    text = "\n".join(lines) + "\n"
    (out / "cuda.md").write_text(text)
    return text


def write_benchmarks(text: str, stamp: str) -> None:
    path = ROOT / "BENCHMARKS.md"
    old = path.read_text()
    block = f"{BEGIN}\n## CUDA, by benchmarks/gpu_plan.py ({stamp})\n\n{text}{END}"
    if BEGIN in old:
        new = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, old, flags=re.S)
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(new)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="gpu-results", help="results folder (default gpu-results)")
    p.add_argument("--dry-run", action="store_true", help="every step on the CPU provider")
    p.add_argument("--no-install", action="store_true", help="skip pip install .[gpu]")
    p.add_argument("--examples", help="comma-separated example names (default: every one)")
    p.add_argument("--families", help="comma-separated model types, or none (default: every "
                                      "type the coverage table imports exactly)")
    p.add_argument("--jobs", type=int, default=8, help="parallel compiles and verifies")
    p.add_argument("--lengths", help="verify's lengths (default: its own; 1,17,61 dry)")
    p.add_argument("--no-bench", action="store_true", help="skip step 5 (the speed tables)")
    p.add_argument("--write-benchmarks", action="store_true",
                   help="replace BENCHMARKS.md's generated CUDA section")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    (out / "specs").mkdir(parents=True, exist_ok=True)
    provider = "cpu" if args.dry_run else "cuda"
    install = [sys.executable, "-m", "pip", "install", "-q", "-c", "constraints.txt", "-e",
               ".[gpu]"]
    if args.dry_run or args.no_install:
        print(f"install: skipped ({' '.join(install[2:])})", file=sys.stderr)
    elif _run(install, 1800)[0]:
        sys.exit("gpu_plan: installing the gpu extra failed")
    names = args.examples.split(",") if args.examples else None
    specs = sorted(p for p in (ROOT / "examples").glob("*.attn")
                   if names is None or p.stem in names)
    types = None if args.families is None else [t for t in args.families.split(",")
                                                if t and t != "none"]
    specs += family_specs(out / "specs", types)
    facts = {"versions": versions(provider), "provider": provider}
    facts["compile"] = compile_all(specs, out / "models", args.jobs)
    models = sorted((out / "models").glob("*/*.onnx"))
    if args.dry_run:  # the CPU provider runs no bfloat16
        models = [m for m in models if not m.parent.name.endswith("__bf16")]
    facts["placement"] = scan(models, provider, out, args.jobs)
    dtypes = ["float32", "float16"] if args.dry_run else ["float16", "bfloat16", "float32"]
    lengths = args.lengths or ("1,17,61" if args.dry_run else None)
    facts["verify"] = verify_all(specs, dtypes, provider, lengths, args.jobs)
    facts["bench"] = (None if args.no_bench else
                      bench(provider, out, args.dry_run, peak_tflops(provider)))
    text = report(out, facts)
    (out / "facts.json").write_text(json.dumps(facts, indent=1, default=str))
    if args.write_benchmarks and not args.dry_run:
        write_benchmarks(text, time.strftime("%Y-%m-%d"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
