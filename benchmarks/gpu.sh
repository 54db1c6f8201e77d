#!/usr/bin/env bash
# The GPU checks of issue 6, for a GPU machine: onnxruntime-gpu 1.31 (and lark) installed into
# /tmp/ortsite first (pip install --target /tmp/ortsite), next to the machine's CUDA torch. Run from the repository root:
#   bash benchmarks/gpu.sh verify      # every example, float32 / float16 / bfloat16, on CUDA
#   bash benchmarks/gpu.sh bench       # benchmarks/gpu.attn against torch SDPA, float16
#   bash benchmarks/gpu.sh seq2seq     # issue 43: the encoder-decoder and vision examples
#                                      # (float32, float16) and seq2seq_decode.py on CUDA
#                                      # (transformers staged in /tmp/ortsite too)
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
    # one verify per (dtype, example), eight at a time (each is mostly CPU work: the oracle and
    # the torch module); ort-cpu is planned for the CPU (its float32 GQA has no CUDA kernel) and
    # bfloat16 has no CPU kernels, so the targets are portable and ort-cuda
    for dtype in ${DTYPES:-float32 float16 bfloat16}; do
      for f in examples/*.attn; do echo "$dtype $f"; done
    done | xargs -P "${JOBS:-8}" -L 1 sh -c '
      log="$0/verify-$1-$(basename "$2" .attn).txt"
      python3 -m attndsl.cli verify "$2" --providers cuda --dtype "$1" --targets portable,ort-cuda -q > "$log" 2>&1
      echo "verify $1 $2: exit $?"' "$out" | sort | tee "$out/verify-summary.txt"
    tar -C "$out" -czf "$out/verify-logs.tgz" $(cd "$out" && ls verify-*-*.txt) && rm -f "$out"/verify-*-*.txt ;;&
  bench|all)
    for layer in gpu_causal gpu_full gpu_gqa gpu_window; do
      python3 -m attndsl.cli bench benchmarks/gpu.attn --name "$layer" --providers cuda \
        --dtype float16 --batch 4 --lengths 1024,2048,4096,8192 --targets ort-cuda --markdown -q \
        | tee "$out/bench-$layer.md"
    done ;;
  seq2seq)
    for dtype in float32 float16; do
      for f in vaswani_transformer vision_encoders; do echo "$dtype $f"; done
    done | xargs -P 4 -L 1 sh -c '
      timeout 360 python3 -m attndsl.cli verify "examples/$1.attn" --providers cuda \
        --dtype "$0" --targets portable,ort-cuda -q > "'"$out"'/verify-$0-$1.txt" 2>&1
      echo "verify $0 $1: exit $?"' | sort | tee "$out/verify-summary.txt" &
    for batch in 1 4; do
      timeout 300 python3 benchmarks/seq2seq_decode.py --device cuda --batch "$batch" \
        --new 64 --repeat 3 > "$out/seq2seq-cuda-b$batch.md" 2>&1
      echo "seq2seq batch $batch: exit $?"
    done
    wait ;;
esac
