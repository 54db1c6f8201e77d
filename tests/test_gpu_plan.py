"""The GPU plan (benchmarks/gpu_plan.py) end to end as a dry run on the CPU provider: every
step but the CUDA session, on one example and one family: compiles, ONNX Runtime's own
placement log against the check, the kernel keys, verify, the speed tables, the report."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_plan

_CLI = [sys.executable, "-m", "attndsl.cli"]


def _cli_in_process(monkeypatch) -> None:
    """The plan's `python -m attndsl.cli ...` commands (20 of them: compiles, verifies,
    benches, generates) run `attndsl.cli.main` in this process, one at a time, with their
    environment, folder, stdout, stderr and exit code as the plan gives and reads them: a new
    process imports torch and ONNX Runtime again, most of a command's time here. Its other
    commands (the placement scan, which reads ONNX Runtime's log from its own process's
    stderr) run in their own processes. The CLI's process boundary is tested by test_cli and
    test_new_user_cli."""
    from attndsl.cli import main

    real, lock = subprocess.run, threading.Lock()

    def run(cmd, *args, cwd=None, env=None, **kwargs):
        if list(cmd[:3]) != _CLI:
            return real(cmd, *args, cwd=cwd, env=env, **kwargs)
        out, err = io.StringIO(), io.StringIO()
        with lock, monkeypatch.context() as m:  # the jobs' threads: a command at a time
            for key, value in (env or {}).items():
                if os.environ.get(key) != value:
                    m.setenv(key, value)
            m.chdir(cwd or os.getcwd())
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main([str(c) for c in cmd[3:]])
                except SystemExit as exit_:  # argparse's usage error
                    code = exit_.code
        return subprocess.CompletedProcess(cmd, code, out.getvalue(), err.getvalue())

    monkeypatch.setattr(subprocess, "run", run)


def test_the_gpu_plan_runs_end_to_end_on_the_cpu(tmp_path, capsys, monkeypatch) -> None:
    _cli_in_process(monkeypatch)
    out = tmp_path / "results"
    assert gpu_plan.main(["--dry-run", "--out", str(out), "--examples", "llama_gqa",
                          "--families", "llama", "--jobs", "2"]) == 0
    facts = json.loads((out / "facts.json").read_text())
    assert facts["provider"] == "cpu"
    assert {(c["spec"], c["variant"]) for c in facts["compile"] if c["exit"] == 0} == {
        (s, v) for s in ("llama_gqa", "family_llama") for v in gpu_plan.VARIANTS}
    scanned = facts["placement"]
    assert len(scanned) >= 8 and all(r["agrees"] and not r["error"] for r in scanned)
    keys = json.loads((out / "placement-keys.json").read_text())
    assert ["com.microsoft", "GroupQueryAttention", 1, {"M": "int32", "T": "float16",
                                                         "T_CACHE": "float16"}] in keys["placed"]
    assert keys["missing"] == []
    assert {(v["spec"], v["dtype"]) for v in facts["verify"] if v["exit"] == 0} == {
        (s, d) for s in ("llama_gqa", "family_llama") for d in ("float32", "float16")}
    report = (out / "cuda.md").read_text()
    for part in ("### Placement", "### Verify on cpu", "| gpu_causal | 32 |", "| bigbird_attn |",
                 "| llama_lm | float32, int4 |"):
        assert part in report, part
    assert report in capsys.readouterr().out


def test_the_scan_reads_onnx_runtimes_log_lines() -> None:
    """Lines as onnxruntime-gpu 1.31.1 wrote them on an H200 (its verbose log), and lines of
    the same log that name no missing kernel."""
    from gpu_plan_steps import not_found

    log = ["2026-11-26 03:43:01.1 [I:onnxruntime:, cuda_execution_provider.cc:2540 GetCapability]"
           " CUDA kernel not found in registries for Op type: Elu node name: n20_Elu",
           "2026-11-26 03:43:01.1 [I:onnxruntime:, cuda_execution_provider.cc:2540 GetCapability]"
           " CUDA kernel not found in registries for Op type: Pad node name: n62_Pad",
           "2026-11-26 03:43:00.4 [I:onnxruntime:, fallback_cpu_capability.cc:167 "
           "GetCpuPreferredNodes] ORT optimization- Force fallback to CPU execution for node: "
           "n79_Squeeze because the CPU execution path is deemed faster"]
    assert not_found(log) == {"n20_Elu", "n62_Pad"}
    assert not_found(log[2:]) == set()
