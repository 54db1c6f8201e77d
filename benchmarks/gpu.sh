#!/usr/bin/env bash
# The GPU checks of issue 6, for a GPU machine: onnxruntime-gpu 1.31 (and lark) installed into
# /tmp/ortsite first (pip install --target /tmp/ortsite), next to the machine's CUDA torch. Run from the repository root:
#   bash benchmarks/gpu.sh verify      # every example, float32 / float16 / bfloat16, on CUDA
#   bash benchmarks/gpu.sh bench       # benchmarks/gpu.attn against torch SDPA, float16
# Results go to $OUT (or ./gpu-results) for BENCHMARKS.md.
set -uo pipefail
export PYTHONPATH=/tmp/ortsite:$PWD
out=${OUT:-gpu-results}
mkdir -p "$out"
python3 -c 'import torch, onnxruntime as o; print(o.__version__, o.get_available_providers(), torch.cuda.get_device_name())' \
  | tee "$out/versions.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$out/versions.txt"
case "${1:-all}" in
  verify|all)
    for dtype in float32 float16 bfloat16; do
      targets=portable,ort-cuda   # ort-cpu is planned for the CPU (its float32 GQA has no
                                  # CUDA kernel), bfloat16 has no CPU kernels
      for f in examples/*.attn; do
        python3 -m attndsl.cli verify "$f" --providers cuda --dtype "$dtype" --targets "$targets" -q \
          > "$out/verify-$dtype-$(basename "$f" .attn).txt" 2>&1
        echo "verify $dtype $f: exit $?" | tee -a "$out/verify-summary.txt"
      done
    done ;;&
  bench|all)
    for layer in gpu_causal gpu_full gpu_gqa gpu_window; do
      python3 -m attndsl.cli bench benchmarks/gpu.attn --name "$layer" --providers cuda \
        --dtype float16 --batch 4 --lengths 1024,2048,4096,8192 --targets ort-cuda --markdown -q \
        | tee "$out/bench-$layer.md"
    done ;;
esac
