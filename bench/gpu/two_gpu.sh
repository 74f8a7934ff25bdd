#!/usr/bin/env bash
# Issue 42 on one or two GPUs of one host, each engine with the planner's own arguments
# (`llmfleet plan` of bench/gpu/plan-heldout-*.yaml), dummy weights. On the GPU machine, from the
# project root, after the vLLM bundle is installed (bench/gpu/README.md):
#   bash bench/gpu/two_gpu.sh STEP...    STEP: kv | wide | deep
# Results: $OUT/two-<date>.jsonl (measure.py's lines), logs beside it.
#   kv    GPU 0: Llama-3.1-8B's shape as a pre-quantized FP8 checkpoint (compressed-tensors W8A8,
#         bench/gpu/models/llama-3.1-8b-fp8-ct); GPU 1: the 8B in bf16 with --kv-cache-dtype fp8.
#         Then tight fits of the two held-out shapes: GPU 0 heldout-wide-17b at utilization 0.29
#         (about 5.6 GiB of KV cache; 0.5 on an H100), GPU 1 heldout-deep-10b at 0.18 (about 4 GiB;
#         0.31 on an H100).
#   wide  heldout-wide-17b (hidden 5120, 48 layers, MLP 3.4 x, 152k vocabulary; no calibrated
#         shape is this wide) as 2 x TP1 (an engine on each GPU, side by side) and then 1 x TP2.
#   deep  heldout-deep-10b (hidden 3072, 60 layers, MLP 4 x, 256k vocabulary) likewise.
# Per engine: batch-1 TTFT at 512 and 2,048 tokens, decode steps at concurrency 1, 32 and 128,
# saturation (greedy) at 2 x max_num_seqs requests of 512/256 and 256 of 2,048/128.
set -uo pipefail
. bench/gpu/engines.sh
R=$OUT/two-$(date -u +%F).jsonl
M=bench/gpu/models L8=$MODELS/llama-3.1-8b
# The plan's settings for these shapes on H200 (512 sequences at 512/256 for every layout).
PLAN=(--max-model-len 8192 --max-num-batched-tokens 16384 --max-num-seqs 512)
LOAD=(--ttft 512,2048 --points 1x512x64,32x1024x128,128x512x128 --saturate-greedy 1024x512x256,256x2048x128)
KV8=(--max-model-len 8192 --max-num-batched-tokens 16384 --max-num-seqs 256 --ttft 512,2048
     --points 1x512x64,64x512x128 --saturate-greedy 512x512x256)
TIGHT=(--max-model-len 8192 --max-num-batched-tokens 16384 --max-num-seqs 16 --ttft 512,2048 --points 1x512x64,8x512x128)
for step in "$@"; do
  case $step in
  kv)
    eng q42-8b-fp8-ckpt 0 170 "$M/llama-3.1-8b-fp8-ct" "${KV8[@]}" &
    eng q42-8b-kv-fp8 1 170 "$L8" "${KV8[@]}" --kv-cache-dtype fp8 & wait
    uw=$([ $H200 = 1 ] && echo 0.29 || echo 0.5) ud=$([ $H200 = 1 ] && echo 0.18 || echo 0.31)
    eng tight-wide-u$uw 0 150 "$M/heldout-wide-17b" --gpu-memory-utilization $uw "${TIGHT[@]}" &
    eng tight-deep-u$ud 1 150 "$M/heldout-deep-10b" --gpu-memory-utilization $ud "${TIGHT[@]}" & wait ;;
  wide|deep)
    m=$M/heldout-$([ $step = wide ] && echo wide-17b || echo deep-10b)
    eng $step-tp1-a 0 250 "$m" "${PLAN[@]}" "${LOAD[@]}" & eng $step-tp1-b 1 250 "$m" "${PLAN[@]}" "${LOAD[@]}" & wait
    eng $step-tp2 0,1 200 "$m" "${PLAN[@]}" "${LOAD[@]}" ;;
  *) echo "unknown step $step"; exit 2 ;;
  esac
done
grep -h "GPU KV cache size\|Maximum concurrency" "$OUT"/*.log | sort | uniq -c
