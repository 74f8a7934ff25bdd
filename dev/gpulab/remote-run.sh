#!/usr/bin/env bash
# On the GPU machine, after stage.sh printed UNPACKED and ../shared/gpu's bundle is installed
# (.gpu-bundle/gpu/remote-install.sh): the lab with the operator on the real GPUs, then each
# scenario named (scenario.py's SCENARIOS); results and logs under $OUT.
#   bash dev/gpulab/remote-run.sh 8b 8b-cache
set -euo pipefail
cd "$(dirname "$0")/../.."
GPULAB=${GPULAB:-/tmp/gpulab}
. .gpu-bundle/gpu/env.sh  # the bundle's PYTHONPATH (vLLM), offline switches, MODELS
# Pods get the bundle's packages; the lab, the node runner and the operator get their own.
export LLMFLEET_GPU_PYTHONPATH=$PYTHONPATH
# Absolute: the node runner works in its own folder, and its imports (localcluster.imagepull)
# reach the operator package.
export PYTHONPATH=$PWD/dev:$PWD/operator/src:$GPULAB/labsite
export LLMFLEET_CACHE=$GPULAB/cache LLMFLEET_CLUSTER_DIR=$GPULAB/cluster
export LLMFLEET_KWOK=0 LLMFLEET_LWS=0 LLMFLEET_KEDA=0
OUT=${OUT:-/tmp/gpulab-out}
mkdir -p "$OUT"
args=()
for s in "$@"; do args+=(--scenario "$s"); done
# NAME=DIR model table entries over the bundle's config-only folders (8b-real: a written checkpoint).
for m in ${GPULAB_MODEL:-}; do args+=(--model "$m"); done
status=0
timeout "${GPULAB_TIMEOUT:-480}" python3 -m gpulab run "${args[@]}" --results "$OUT" || status=$?
# What explains a failure: every component's log and the pods' logs, small enough to come back.
mkdir -p "$OUT/logs"
for f in "$LLMFLEET_CLUSTER_DIR"/*.log "$LLMFLEET_CLUSTER_DIR"/pods/*.log; do
  [ -f "$f" ] && tail -c 200000 "$f" > "$OUT/logs/$(basename "$f")"
done
python3 -m gpulab down >/dev/null 2>&1 || true
exit $status
