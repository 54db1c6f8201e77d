"""The GPU plan (benchmarks/gpu_plan.py) end to end as a dry run on the CPU provider: every
step but the CUDA session, on one example and one family: compiles, ONNX Runtime's own
placement log against the check, the kernel keys, verify, the speed tables, the report."""

from __future__ import annotations

import json
import sys

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_plan


def test_the_gpu_plan_runs_end_to_end_on_the_cpu(tmp_path, capsys) -> None:
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
