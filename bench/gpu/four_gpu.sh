#!/usr/bin/env bash
# Issue 46: Llama-3.1-70B's shape over the four GPUs of one host, each layout with the planner's own
# engine arguments (`llmfleet plan -f bench/gpu/plan-70b-4gpu.yaml`, the four-GPU twins of
# examples/llama-3.1-70b-8xh100.yaml): max_model_len 16384, max_num_batched_tokens 16384,
# utilization 0.9, max_num_seqs as the plan's candidate table gives it. On the GPU machine, from the
# project root, after the vLLM bundle is installed (bench/gpu/README.md):
#   bash bench/gpu/four_gpu.sh STEP...    STEP: bf16-tp4 | bf16-2xtp2 | fp8-tp4 | fp8-split | fp8-two
# Results: $OUT/four-<date>.jsonl (one line a figure, measure.py's), logs beside it.
#
# Per engine (measure.py): batch-1 TTFT at 512 and 2,048 prompt tokens, the decode step of one
# request (1x512x64: low load), and two saturation runs, greedy: 2 x max_num_seqs requests of
# 512/256 (the examples' workload) and max_num_seqs/2 requests of 2,048/128 (prefill-heavy).
# Engines of a multi-pod layout run side by side, one per GPU group, and their throughputs add.
# fp8-split runs one TP2 engine on GPUs 0-1 and one TP1 engine on each of GPUs 2 and 3 at once: the
# four GPU workers a 2 x TP2 or a 4 x TP1 layout would run, so each engine sees the same host, and
# one start measures both layouts (2 x TP2 = twice the TP2 engine, 4 x TP1 = the two TP1 engines
# twice). On H100s (80 GB) a 70B in fp8 does not fit one GPU (2026-11-24): there fp8-split runs the
# two TP2 engines instead.
set -uo pipefail
. bench/gpu/engines.sh
R=$OUT/four-$(date -u +%F).jsonl
L70=$MODELS/llama-3.1-70b
# e70 TAG GPUS SECONDS SEQS [args...]: a 70B engine with the plan's settings and the workloads above.
e70() { local tag=$1 gpus=$2 secs=$3 seqs=$4; shift 4
  eng "$tag" "$gpus" "$secs" "$L70" --max-model-len 16384 --max-num-batched-tokens 16384 \
    --gpu-memory-utilization 0.9 --max-num-seqs "$seqs" --ttft 512,2048 --points 1x512x64 \
    --saturate-greedy "$((2 * seqs))x512x256${PREFILL_HEAVY-,$((seqs / 2))x2048x128}" "$@"; }
FP8=(--engine-arg quantization=fp8)

for step in "$@"; do
  case $step in
  bf16-tp4) e70 bf16-tp4 0,1,2,3 330 512 ;;
  bf16-2xtp2)  # H200: 377,280 KV tokens an engine, 491 sequences; H100: 19,712 tokens, 25 sequences.
    s=$([ $H200 = 1 ] && echo 491 || echo 25)
    e70 bf16-2xtp2-a 0,1 320 "$s" & e70 bf16-2xtp2-b 2,3 320 "$s" & wait ;;
  bf16-2xtp2-prefill)  # the prefill-heavy run alone (2026-11-27: the full step ran past its limit)
    s=$([ $H200 = 1 ] && echo 491 || echo 25); a=(--max-model-len 16384 --max-num-batched-tokens 16384
      --gpu-memory-utilization 0.9 --max-num-seqs "$s" --saturate-greedy "$((s / 2))x2048x128")
    eng bf16-2xtp2-pa 0,1 320 "$L70" "${a[@]}" & eng bf16-2xtp2-pb 2,3 320 "$L70" "${a[@]}" & wait ;;
  fp8-tp4) e70 fp8-tp4 0,1,2,3 300 512 "${FP8[@]}" ;;
  fp8-split)  # TP2: 512 sequences on H200 (586,336 tokens), 297 on H100; TP1 (H200 only): 231.
    if [ $H200 = 1 ]; then
      e70 fp8-tp2 0,1 380 512 "${FP8[@]}" & e70 fp8-tp1-a 2 380 231 "${FP8[@]}" &
      e70 fp8-tp1-b 3 380 231 "${FP8[@]}" & wait
    else
      e70 fp8-2xtp2-a 0,1 330 297 "${FP8[@]}" & e70 fp8-2xtp2-b 2,3 330 297 "${FP8[@]}" & wait
    fi ;;
  fp8-two)  # Where only two GPUs are lent (H200): the per-GPU throughput of fp8 4 x TP1 against
    # 2 x TP2 from two TP1 engines side by side, then one TP2 engine; 512/256 only (PREFILL_HEAVY=).
    PREFILL_HEAVY=
    e70 fp8-tp1-a 0 280 231 "${FP8[@]}" & e70 fp8-tp1-b 1 280 231 "${FP8[@]}" & wait
    e70 fp8-tp2 0,1 260 512 "${FP8[@]}"; unset PREFILL_HEAVY ;;
  *) echo "unknown step $step"; exit 2 ;;
  esac
done
grep -h "GPU KV cache size\|Maximum concurrency" "$OUT"/*.log | sort | uniq -c
