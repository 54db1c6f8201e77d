#!/usr/bin/env bash
# The GPU checks of issue 43, for a GPU machine with onnxruntime-gpu, lark and transformers
# installed into /tmp/ortsite beside its CUDA torch. Run from the repository root:
#   bash benchmarks/gpu_seq2seq_vision.sh
# verify (float32, float16; targets portable and ort-cuda) of the encoder-decoder example and
# the vision encoders, then benchmarks/seq2seq_decode.py on CUDA; results in $OUT.
set -uo pipefail
export PYTHONPATH=/tmp/ortsite:$PWD
out=${OUT:-gpu-results}
mkdir -p "$out"
python3 -c 'import torch, onnxruntime as o; print(o.__version__, o.get_available_providers(), torch.cuda.get_device_name())' \
  | tee "$out/versions.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$out/versions.txt"
for dtype in float32 float16; do
  for f in vaswani_transformer vision_encoders; do echo "$dtype $f"; done
done | xargs -P 4 -L 1 sh -c '
  timeout 360 python3 -m attndsl.cli verify "examples/$1.attn" --providers cuda --dtype "$0" \
    --targets portable,ort-cuda -q > "'"$out"'/verify-$0-$1.txt" 2>&1
  echo "verify $0 $1: exit $?"' | sort | tee "$out/verify-summary.txt" &
for batch in 1 4; do
  timeout 300 python3 benchmarks/seq2seq_decode.py --device cuda --batch "$batch" --new 64 \
    --repeat 3 > "$out/seq2seq-cuda-b$batch.md" 2>&1
  echo "seq2seq batch $batch: exit $?"
done
wait
