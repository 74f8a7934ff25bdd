#!/usr/bin/env bash
# On the GPU machine, from the project root, after the vLLM bundle is installed (bench/gpu/README.md):
#   bash bench/gpu/run.sh PHASE     PHASE: a | b | c | h200   (results: $OUT/<phase>.jsonl, logs beside it)
# Every engine runs with dummy weights and prefix caching off (common.py's defaults); one JSON line a figure.
set -uo pipefail
. .gpu-bundle/gpu/env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PHASE=${1:?phase}
R=$OUT/$PHASE.jsonl
m() { local tag=$1 secs=$2; shift 2
  echo "== $tag ($(date +%T))"
  timeout "$secs" python3 bench/gpu/measure.py --tag "$tag" --results "$R" "$@" > "$OUT/$tag.log" 2>&1
  echo "   exit $? ($(date +%T)); $(grep -c '^{' "$OUT/$tag.log") lines"; grep -E 'Error|error:' "$OUT/$tag.log" | tail -3; }
L8=$MODELS/llama-3.1-8b Q7=$MODELS/qwen2.5-7b L70=$MODELS/llama-3.1-70b
# Validation points (concurrency x prompt x output), none of them in the calibration sweep of 2026-11-23.
POINTS=1x1024x256,8x2048x128,32x1024x256,64x256x512,128x2048x64,192x768x256,96x128x128,24x7936x64
case $PHASE in
a)  # The plan's engine arguments for the default workload (512/256) on the 8B shape, then vLLM's defaults.
    m plan-8b 330 "$L8" --max-num-seqs 256 --max-num-batched-tokens 16384 --ttft 128,1024,2048,7936 \
      --points "$POINTS" --saturate 1024x512x256 --saturate-greedy 1024x512x256
    m default-8b 200 "$L8" --saturate 1024x512x256 ;;
b)  # A second shape, a second utilization, a second context length; and 512 sequences.
    m qwen7b-u080-16k 200 "$Q7" --gpu-memory-utilization 0.8 --max-model-len 16384 --max-num-seqs 256 \
      --max-num-batched-tokens 16384 --ttft 1024 --points 1x1024x256,48x512x256,192x512x128,16x4096x128
    m plan-8b-u095-32k 200 "$L8" --gpu-memory-utilization 0.95 --max-model-len 32768 --max-num-seqs 256 \
      --max-num-batched-tokens 16384 --saturate 1024x512x256
    m seqs512-8b 170 "$L8" --max-num-seqs 512 --max-num-batched-tokens 16384 --saturate 1024x512x256 ;;
c)  # A long workload (2048/512): KV holds 444,528 / 2,560 = 173 such sequences; the plan's 173 vs 256.
    m kvbound-8b-2048 150 "$L8" --max-num-seqs 173 --max-num-batched-tokens 16384 --saturate 384x2048x512
    m seqs256-8b-2048 150 "$L8" --max-num-seqs 256 --max-num-batched-tokens 16384 --saturate 384x2048x512 ;;
h200)  # The same shape and points on an H200 (4.8 TB/s HBM3e): checks the model's per-GPU constants.
    m h200-plan-8b 400 "$L8" --max-num-seqs 512 --max-num-batched-tokens 16384 --ttft 1024,7936 \
      --points 1x1024x256,32x1024x256,128x2048x64,192x768x256 --saturate 1024x512x256 ;;
*)  echo "unknown phase $PHASE"; exit 2 ;;
esac
