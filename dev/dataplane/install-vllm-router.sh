#!/usr/bin/env bash
# Installs the vLLM Router (PyPI vllm-router) into a virtualenv of its own, outside the work tree,
# at the exact versions of vllm-router.lock beside this script (how: locked-venv.sh):
#   ${LLMFLEET_CACHE:-$HOME/.cache/llmfleet}/vllm-router-0.1.17-<first 12 hex of sha256(lock)>
#
#   install-vllm-router.sh               install if needed, then print the path
#   install-vllm-router.sh --print-path  only print the path (installs nothing)
#   install-vllm-router.sh --check       exit 0 if installed, 1 if not
#
# The router's Rust core ships inside the wheel (manylinux, abi3): nothing is compiled here.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=locked-venv.sh
. "$HERE/locked-venv.sh"
LOCK="$HERE/vllm-router.lock"
CACHE="${LLMFLEET_CACHE:-$HOME/.cache/llmfleet}"
VERSION="$(sed -n 's/^vllm-router==//p' "$LOCK")"
VENV="$CACHE/vllm-router-$VERSION-$(sha256sum "$LOCK" | cut -c1-12)"

smoke() {
  "$1/bin/vllm-router" --help >/dev/null
  "$1/bin/python" -c "import vllm_router_rs, vllm_router.version as v; print('vllm-router', v.__version__)" >&2
}

locked_venv "${1:-}" install-vllm-router "$LOCK" "$VENV" "${LLMFLEET_ROUTER_PYTHON:-python3.11}" \
  "about 60 MB"
