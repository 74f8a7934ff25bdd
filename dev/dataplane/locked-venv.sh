# Sourced by install-vllm.sh and install-vllm-router.sh: a virtualenv of its own per lock file,
# outside the work tree, with the lock's exact versions (pip --no-deps: the lock is complete).
# A changed lock makes a new virtualenv (its path carries the lock's hash); a second run finds
# the finished one and does nothing. Concurrent callers wait on a lock file instead of racing.
#
#   locked_venv MODE TOOL LOCK VENV PYTHON SIZE
#
# MODE is the calling script's argument: "" installs if needed and prints the path last,
# --print-path only prints it, --check exits 0 if installed and 1 if not. SIZE is said in the
# log line. The caller defines `smoke VENV`, run on the new virtualenv before it counts as done.

locked_venv() {
  local mode="$1" tool="$2" lock="$3" venv="$4" python="$5" size="$6"
  local done="$venv/.llmfleet-complete" cache start
  cache="$(dirname "$venv")"
  case "$mode" in
    --print-path) echo "$venv"; return 0 ;;
    --check) [ -e "$done" ]; return ;;
    "") ;;
    *) echo "usage: $tool.sh [--print-path|--check]" >&2; return 2 ;;
  esac
  if [ -e "$done" ]; then
    echo "$venv"
    return 0
  fi
  mkdir -p "$cache"
  exec 8>"$cache/.$tool.lock"
  flock 8
  if [ ! -e "$done" ]; then  # a concurrent caller may have finished while we waited
    start=$(date +%s)
    rm -rf "$venv"  # a half-made one from an interrupted run
    echo "$tool: creating $venv ($size)" >&2
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --no-deps --no-input -r "$lock" >&2
    smoke "$venv"
    touch "$done"
    echo "$tool: done in $(( $(date +%s) - start ))s" >&2
  fi
  exec 8>&-
  echo "$venv"
}
