# Sourced by four_gpu.sh and two_gpu.sh on the GPU machine: one engine of measure.py in the
# background-able form, its log in $OUT/TAG.log, its JSON lines appended to $R.
#   eng TAG GPUS SECONDS MODEL [measure.py args...]   GPUS: CUDA_VISIBLE_DEVICES; TP = their count
# Every engine has a torch.compile cache of its own (VLLM_CACHE_ROOT), so each compiles afresh as a
# new pod does.
. .gpu-bundle/gpu/env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.txt"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case $GPU in *H200*) H200=1 ;; *) H200=0 ;; esac
echo "GPU: $GPU x $(nvidia-smi -L | wc -l)"
eng() { local tag=$1 gpus=$2 secs=$3 model=$4; shift 4
  local tp=$(( $(tr -cd , <<<"$gpus" | wc -c) + 1 ))
  echo "== $tag on GPUs $gpus, TP $tp ($(date +%T))"
  CUDA_VISIBLE_DEVICES=$gpus VLLM_CACHE_ROOT=/tmp/vc-$tag timeout "$secs" python3 bench/gpu/measure.py \
    "$model" --tag "$tag" --results "$R" --tp "$tp" "$@" > "$OUT/$tag.log" 2>&1
  echo "   $tag exit $? ($(date +%T)); $(grep -c '^{' "$OUT/$tag.log") lines"
  grep -E "GPU KV cache size|Error|error:" "$OUT/$tag.log" | tail -3; }
