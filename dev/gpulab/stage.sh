#!/usr/bin/env bash
# On the GPU machine, first in every call (README.md beside this file): keep the files of .gpu-lab/
# this call carried in $GPULAB/stage (the machine keeps /tmp while it stays warm between calls),
# and once SHA256SUMS's every file is there and checks, unpack them: the binaries where the lab's
# build-tools.sh looks for built tools ($LLMFLEET_CACHE/bin/<component>-<version>/), the Python
# packages in $GPULAB/labsite. Prints STAGED k/n, or UNPACKED; exits 3 when a file of an earlier
# call is gone (the machine was given back between calls: start again with the first call).
set -euo pipefail
GPULAB=${GPULAB:-/tmp/gpulab}
SRC=${SRC:-.gpu-lab}
export LLMFLEET_CACHE=${LLMFLEET_CACHE:-$GPULAB/cache}
stage=$GPULAB/stage
if [ -f "$GPULAB/UNPACKED" ]; then echo "UNPACKED already"; exit 0; fi
mkdir -p "$stage"
if [ -d "$SRC" ]; then tar -C "$SRC" -c . | tar -C "$stage" -x; fi
[ -f "$stage/SHA256SUMS" ] || { echo "NOT WARM: no SHA256SUMS staged (send .gpu-lab/SHA256SUMS)"; exit 3; }
want=$(wc -l < "$stage/SHA256SUMS")
have=0
while read -r _ f; do [ -f "$stage/$f" ] && have=$((have + 1)); done < "$stage/SHA256SUMS"
if [ "$have" -lt "$want" ]; then
  echo "STAGED $have/$want; missing:"
  while read -r _ f; do [ -f "$stage/$f" ] || echo "  $f"; done < "$stage/SHA256SUMS"
  exit 0
fi
(cd "$stage" && sha256sum --quiet -c SHA256SUMS)
for xzf in "$stage"/bin/*/*.xz; do
  dir=$LLMFLEET_CACHE/bin/$(basename "$(dirname "$xzf")")
  mkdir -p "$dir"
  case $xzf in
    *.tar.xz) xz -dc "$xzf" | tar -C "$dir" -x ;;  # KEDA's CRDs and RBAC
    *) xz -dc "$xzf" > "$dir/$(basename "$xzf" .xz)"; chmod +x "$dir/$(basename "$xzf" .xz)" ;;
  esac
done
xz -dc "$stage/labsite.tar.xz" | tar -C "$GPULAB" -x
# The vLLM Router: the virtualenv install-vllm-router.sh would make (it cannot here: no PyPI), as
# the machine's python3 over the lock's packages, marked complete so the node runner takes it.
xz -dc "$stage/routersite.tar.xz" | tar -C "$GPULAB" -x
venv=$(bash "$(dirname "$0")/../dataplane/install-vllm-router.sh" --print-path)
py=$(command -v python3)
mkdir -p "$venv/bin"
printf '#!/bin/sh\nPYTHONPATH=%s exec %s "$@"\n' "$GPULAB/routersite" "$py" > "$venv/bin/python"
printf '#!/bin/sh\nPYTHONPATH=%s exec %s -c %s "$@"\n' "$GPULAB/routersite" "$py" \
  "'import sys; from vllm_router.launch_router import main; sys.argv[0] = \"vllm-router\"; sys.exit(main())'" \
  > "$venv/bin/vllm-router"
chmod +x "$venv/bin/python" "$venv/bin/vllm-router"
"$venv/bin/python" -c "import vllm_router_rs, vllm_router.version as v; print('vllm-router', v.__version__)"
"$venv/bin/vllm-router" --help > /dev/null
touch "$venv/.llmfleet-complete"
touch "$GPULAB/UNPACKED"
echo "UNPACKED into $LLMFLEET_CACHE/bin and $GPULAB/labsite"
