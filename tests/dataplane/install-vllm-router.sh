#!/usr/bin/env bash
# Installs the vLLM Router (PyPI vllm-router) into a virtualenv of its own, outside the work tree,
# at the exact versions of vllm-router.lock beside this script:
#   ${LLMFLEET_CACHE:-$HOME/.cache/llmfleet}/vllm-router-0.1.17-<first 12 hex of sha256(lock)>
# A changed lock makes a new virtualenv; a second run finds the finished one and does nothing.
# Concurrent callers wait on a lock file instead of racing. Prints the virtualenv's path last.
#
#   install-vllm-router.sh               install if needed, then print the path
#   install-vllm-router.sh --print-path  only print the path (installs nothing)
#   install-vllm-router.sh --check       exit 0 if installed, 1 if not
#
# The router's Rust core ships inside the wheel (manylinux, abi3): nothing is compiled here.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCK="$HERE/vllm-router.lock"
CACHE="${LLMFLEET_CACHE:-$HOME/.cache/llmfleet}"
PYTHON="${LLMFLEET_ROUTER_PYTHON:-python3.11}"
VERSION="$(sed -n 's/^vllm-router==//p' "$LOCK")"
HASH="$(sha256sum "$LOCK" | cut -c1-12)"
VENV="$CACHE/vllm-router-$VERSION-$HASH"
DONE="$VENV/.llmfleet-complete"

log() { echo "install-vllm-router: $*" >&2; }

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
exec 8>"$CACHE/.vllm-router-install.lock"
flock 8
if [ ! -e "$DONE" ]; then  # a concurrent caller may have finished while we waited
  start=$(date +%s)
  rm -rf "$VENV"  # a half-made one from an interrupted run
  log "creating $VENV (about 60 MB)"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --no-deps --no-input -r "$LOCK" >&2
  "$VENV/bin/vllm-router" --help >/dev/null
  "$VENV/bin/python" -c "import vllm_router_rs, vllm_router.version as v; print('vllm-router', v.__version__)" >&2
  touch "$DONE"
  log "done in $(( $(date +%s) - start ))s"
fi
echo "$VENV"
