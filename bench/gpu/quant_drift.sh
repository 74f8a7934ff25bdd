#!/usr/bin/env bash
# Issue 42's last GPU questions, on one GPU, dummy weights. On the GPU machine, from the project
# root, after the vLLM bundle is installed (bench/gpu/README.md):
#   bash bench/gpu/quant_drift.sh STEP...    STEP: drift | drift-b | quant | w4 | gptoss
#   drift, drift-b  The activation peak of a fresh torch.compile against a start that loads its compile
#          cache: each engine starts twice on one VLLM_CACHE_ROOT (tag -cold, then -warm), KV
#          cache only. Llama-3.1-8B's shape as a compressed-tensors FP8 checkpoint, the 8B in bf16
#          quantized to fp8 on load (both at 16,384 and 8,192 batched tokens) and the held-out wide
#          bf16 shape: which formats' warm peak is lower, and by how much per batched token.
#   quant  Qwen2.5-7B-Instruct's AWQ and GPTQ-Int4 checkpoints (bench/gpu/models/, w4a16 through
#          vLLM's Marlin kernels): batch-1 TTFT, decode steps at 1, 32 and 128, greedy saturation.
#   w4     Qwen2.5-7B as AWQ (w4a16, Machete) and in 16 bits, decode steps at 1 to 256 sequences and
#          batch-1 TTFT from 128 to 8,000 tokens: where the w4a16 step departs from the 16-bit one.
#   gptoss gpt-oss-20b (MXFP4 experts, bench/gpu/models/gpt-oss-20b): the MoE backend vLLM picks,
#          weights and KV tokens at 8,192 and 131,072 tokens of context, batch-1 to saturation speed.
#   gptoss-warm  gpt-oss-20b and -120b (openai's configs: 32 and 128 experts, 24 and 36 layers),
#          every point run once untimed first (measure.py --warm-each: the TRITON MoE backend's
#          matmul_ogs JIT-compiles per batch shape, which the gptoss step timed): decode steps at
#          1 to 256 sequences, batch-1 TTFT from 128 to 8,000 tokens, greedy saturation.
# Results: $OUT/drift-<date>.jsonl (measure.py's lines), the logs in one $OUT/logs-<step>.tar.gz,
# and the lines of each log that say the peak in $OUT/peaks-<step>.txt.
set -uo pipefail
. .gpu-bundle/gpu/env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/qd-logs
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.txt"
R=$OUT/drift-$(date -u +%F).jsonl
M=bench/gpu/models L8=$MODELS/llama-3.1-8b
# eng TAG CACHE SECONDS MODEL [measure.py args]: one engine, its torch.compile cache in /tmp/vc-CACHE.
eng() { local tag=$1 cache=$2 secs=$3 model=$4; shift 4
  echo "== $tag ($(date +%T))"
  VLLM_CACHE_ROOT=/tmp/vc-$cache timeout "$secs" python3 bench/gpu/measure.py "$model" --tag "$tag" \
    --results "$R" "$@" > "/tmp/qd-logs/$tag.log" 2>&1
  echo "   exit $? ($(date +%T))"
  grep -E "Actual usage|GPU KV cache size|Directly load the compiled|Error" "/tmp/qd-logs/$tag.log" \
    | sed 's/.*\] //' | cut -c1-200 | tail -4; }
pair() { local tag=$1; shift; eng "$tag-cold" "$tag" 200 "$@"; eng "$tag-warm" "$tag" 150 "$@"; }
KV=(--max-model-len 4096 --max-num-seqs 64 --gpu-memory-utilization 0.9)
for step in "$@"; do
  case $step in
  drift)  # the 600 s of one call hold the first two pairs
    pair d-8b-fp8-ckpt "$M/llama-3.1-8b-fp8-ct" "${KV[@]}" --max-num-batched-tokens 16384
    pair d-8b-fp8-load "$L8" "${KV[@]}" --max-num-batched-tokens 16384 --engine-arg quantization=fp8 ;;
  drift-b)
    pair d-8b-fp8-load-8k "$L8" "${KV[@]}" --max-num-batched-tokens 8192 --engine-arg quantization=fp8
    pair d-wide-bf16 "$M/heldout-wide-17b" "${KV[@]}" --max-num-batched-tokens 16384 ;;
  quant)
    for m in ${QUANT_MODELS:-qwen2.5-7b-awq qwen2.5-7b-gptq-int4}; do
      eng "q-$m" "q-$m" 280 "$M/$m" --max-model-len 8192 --max-num-batched-tokens 16384 \
        --max-num-seqs 256 --engine-arg dtype=float16 --ttft 512,2048 \
        --points 1x512x64,32x512x128,128x512x128 --saturate-greedy 512x512x256
    done ;;
  w4)  # the w4a16 step against the 16-bit one on the same shape and GPU, batch 1 to 256
    for m in "$M/qwen2.5-7b-awq" "$MODELS/qwen2.5-7b"; do
      eng "w4-$(basename "$m")" "w4-$(basename "$m")" 280 "$m" --max-model-len 8192 \
        --max-num-batched-tokens 16384 --max-num-seqs 256 --engine-arg dtype=float16 \
        --ttft 128,512,1024,4096,8000 \
        --points 1x512x64,4x512x64,16x512x64,64x512x128,128x512x128,256x512x64,64x2048x64
    done ;;
  gptoss)  # MXFP4 experts (gpt-oss-20b's config.json): weights, KV at 8k and 128k, speed
    eng g-gpt-oss-20b-8k g-gpt-oss 300 "$M/gpt-oss-20b" --max-model-len 8192 \
      --max-num-batched-tokens 16384 --max-num-seqs 256 --ttft 512,2048 \
      --points 1x512x64,32x512x128,128x512x128 --saturate-greedy 512x512x256
    eng g-gpt-oss-20b-128k g-gpt-oss 200 "$M/gpt-oss-20b" --max-model-len 131072 \
      --max-num-batched-tokens 16384 --max-num-seqs 64 ;;
  gptoss-warm)
    for m in gpt-oss-20b gpt-oss-120b; do
      eng "gw-$m" "gw-$m" 280 "$M/$m" --max-model-len 8192 --warm-each \
        --max-num-batched-tokens 16384 --max-num-seqs 256 --ttft 128,512,2048,8000 \
        --points 1x512x64,4x512x64,16x512x64,64x512x64,128x512x64,256x512x64 \
        --saturate-greedy 512x512x256
    done ;;
  gptoss-min)  # as gptoss-warm on the same machine (Triton's cache warm), each timing the
    # fastest of three: matmul_ogs compiles per routing shape too, so one untimed run is not enough
    for m in gpt-oss-20b gpt-oss-120b; do
      eng "gm-$m" "gw-$m" "$([ $m = gpt-oss-20b ] && echo 240 || echo 330)" "$M/$m" --max-model-len 8192 --warm-each --repeat 3 \
        --max-num-batched-tokens 16384 --max-num-seqs 256 --ttft 512,2048,8000 \
        --points 1x512x64,8x512x64,32x512x64,128x512x64,256x512x64 \
        --saturate-greedy 512x512x256
    done ;;
  *) echo "unknown step $step"; exit 2 ;;
  esac
  grep -hE "Actual usage|GPU KV cache size|Directly load the compiled|compile range|init engine" \
    /tmp/qd-logs/*.log | sed 's/.*\] //' > "$OUT/peaks-$step.txt"
  tar -C /tmp/qd-logs -czf "$OUT/logs-$step.tar.gz" .
done
