#!/usr/bin/env bash
# On the GPU machine, from the project root, after the vLLM bundle is installed (bench/gpu/README.md):
#   bash bench/gpu/run.sh PHASE     PHASE: a | b | c | h200 | h200-70b-fp8[-b] | h100-70b-fp8[-u095] | edges | tp2 | spread | hybrid
#   (results: $OUT/<phase>.jsonl, logs beside it)
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
started() { grep -q '"kind": "engine"' "$OUT/$1.log" 2>/dev/null; }   # did the engine of run $1 start?
# The 70B shape in fp8 on ONE GPU: vLLM --quantization fp8 quantizes the bf16 weights on load (0.26.0
# materializes one layer at a time on the GPU, so the 131 GiB of bf16 never sit there at once). Engine
# arguments are the plan's for bench/gpu/plan-70b-fp8.yaml (`llmfleet plan`): max_num_seqs and
# max_num_batched_tokens as the planner sets them, max_model_len 8192, utilization 0.9.
FP8=(--engine-arg quantization=fp8 --max-model-len 8192 --max-num-batched-tokens 16384)
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
h200-70b-fp8)  # 2026-11-24: start 162 s (first, compiling), TTFT + points ~1.5 min, the top_p run 135 s;
    # measure.py runs --saturate before --saturate-greedy, and the greedy run was cut at 490 s (-> -b).
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia-smi.txt"
    m h200-70b-fp8 490 "$L70" "${FP8[@]}" --max-num-seqs 242 --ttft 128,512,2048,7936 \
      --points 1x512x256,1x1024x256,8x512x256,32x1024x256,64x512x256,128x512x256 \
      --saturate-greedy 1024x512x256 --saturate 1024x512x256
    # Only if vLLM could not start it: the same without CUDA graphs / torch.compile.
    started h200-70b-fp8 || m h200-70b-fp8-eager 300 "$L70" "${FP8[@]}" --max-num-seqs 242 --enforce-eager \
      --ttft 512 --points 1x512x256,32x1024x256 --saturate-greedy 1024x512x256 ;;
h200-70b-fp8-b)  # The greedy saturation run that h200-70b-fp8 ran out of time for (same engine).
    m h200-70b-fp8-b 480 "$L70" "${FP8[@]}" --max-num-seqs 242 --saturate-greedy 1024x512x256 ;;
h100-70b-fp8)  # The plan accepts it with 8,976 KV tokens (11 sequences); does vLLM start it? 2026-11-24:
    # no, "No available memory for the cache blocks" (-0.26 GiB) at 8192 and 4096 alike (the activation
    # peak follows max_num_batched_tokens, not max_model_len); the 2048 try was cut by the 600 s call.
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia-smi.txt"
    m h100-70b-fp8 330 "$L70" "${FP8[@]}" --max-num-seqs 11 --ttft 512,2048 \
      --points 1x512x256,8x512x256 --saturate-greedy 256x512x256
    # If it does not fit: try shorter contexts, 4096 then 2048.
    ok=h100-70b-fp8
    for len in 4096 2048; do started $ok && break; ok=h100-70b-fp8-l$len
      m $ok 200 "$L70" "${FP8[@]}" --max-model-len $len --max-num-seqs 11 --ttft 512 \
        --points 1x512x256,8x512x256 --saturate-greedy 256x512x256; done ;;
h100-70b-fp8-u095)  # At 0.9 vLLM found -0.26 GiB for the KV cache (any max_model_len): what 0.95 leaves.
    m h100-70b-fp8-u095 300 "$L70" "${FP8[@]}" --gpu-memory-utilization 0.95 --max-num-seqs 11 --ttft 512,2048 \
      --points 1x512x256,8x512x256 --saturate-greedy 128x512x256 ;;
edges)  # 2026-11-25, two GPUs at once (2 x H200 came: utilization 0.6 and 0.538 there). GPU 0: Qwen2.5-32B's shape (MLP 5.4 x hidden) in bf16 at 0.95, a
    # tight fit (about 11 GiB of KV cache): does the activation reserve follow the MLP's width? GPU 1:
    # Llama-3.1-70B in fp8 at 0.95 with an empty torch.compile cache, as a new pod starts (2026-11-24's
    # run at 0.95 followed failed starts of the same engine, so it hit their compile cache).
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia-smi.txt"
    Q32=bench/gpu/models/qwen2.5-32b
    CUDA_VISIBLE_DEVICES=0 VLLM_CACHE_ROOT=/tmp/vc-q32 m qwen32b-u${Q32_UTIL:-0.95} 400 "$Q32" --gpu-memory-utilization ${Q32_UTIL:-0.95} \
      --max-num-seqs 128 --max-num-batched-tokens 16384 --ttft 512 --points 1x512x128,32x1024x128 &
    CUDA_VISIBLE_DEVICES=1 VLLM_CACHE_ROOT=/tmp/vc-70b m 70b-fp8-u${F70_UTIL:-0.95}-fresh 400 "$L70" "${FP8[@]}" \
      --gpu-memory-utilization ${F70_UTIL:-0.95} --max-num-seqs 11 --ttft 512 &
    wait; grep -h "Actual usage\|GPU KV cache size" "$OUT"/*.log ;;
tp2)  # Llama-3.1-8B's shape over two H100s (TP 2): KV tokens per GPU (what NCCL and the custom
    # all-reduce take), and the decode step against the planner's all-reduce model.
    m tp2-8b 420 "$L8" --tp 2 --max-num-seqs 256 --max-num-batched-tokens 16384 --ttft 1024,4096 \
      --points 1x1024x256,8x1024x128,32x1024x128,128x512x128,256x512x64
    grep -h "Actual usage\|GPU KV cache size\|custom all\|NCCL" "$OUT"/*.log | sort | uniq -c | head -20 ;;
spread)  # Where 2026-11-25's 24 % spread came from: the same saturation run four times in a row on one
    # engine (the first is cold: sampler and batch shapes not yet warm), top-p on GPU 0, greedy on GPU 1.
    S=1024x512x256,1024x512x256,1024x512x256,1024x512x256
    CUDA_VISIBLE_DEVICES=0 m spread-top-p 560 "$L8" --max-num-seqs 512 --max-num-batched-tokens 16384 --saturate $S &
    CUDA_VISIBLE_DEVICES=1 m spread-greedy 560 "$L8" --max-num-seqs 512 --max-num-batched-tokens 16384 \
      --saturate-greedy $S &
    wait ;;
hybrid)  # 2026-11-25: sliding-window models, vLLM's hybrid KV cache (tokens and concurrency as it
    # counts them) against the planner's. GPU 0: Gemma 3 27B's text model (52 of 62 layers sliding,
    # window 1024) at a 32k context; GPU 1: Gemma 2 9B (every other layer sliding, window 4096).
    G3=bench/gpu/models/gemma-3-27b-text G2=bench/gpu/models/gemma-2-9b
    CUDA_VISIBLE_DEVICES=0 m gemma3-27b-32k 420 "$G3" --max-model-len 32768 --max-num-seqs 64 \
      --max-num-batched-tokens 16384 --ttft 1024 --points 1x1024x128 &
    CUDA_VISIBLE_DEVICES=1 m gemma2-9b-8k 420 "$G2" --max-model-len 8192 --max-num-seqs 256 \
      --max-num-batched-tokens 16384 --ttft 1024 --points 1x1024x128 &
    wait; grep -h "GPU KV cache size\|Maximum concurrency\|Actual usage" "$OUT"/*.log ;;
*)  echo "unknown phase $PHASE"; exit 2 ;;
esac
