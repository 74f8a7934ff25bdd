#!/usr/bin/env bash
# Here, with the lab's tools built (`make tools`) and PyPI reachable: what dev/gpulab carries to the
# GPU machine, in files small enough for its 64 MiB calls (README.md: which file goes in which call).
#   .gpu-lab/bin/<component>-<version>/<binary>.xz   the control plane, kubectl and helm (xz -9e)
#   .gpu-lab/bin/py-spy-<version>/py-spy.xz         py-spy, which bench/gpu/start_probe.py samples with
#   .gpu-lab/labsite.tar.xz                          the operator's and the lab's Python packages
#                                                    for the machine's Python 3.12 (pinned by the lock)
#   .gpu-lab/SHA256SUMS                              what stage.sh checks before it unpacks
# Same inputs give the same bytes (xz single-threaded, tar with fixed mtimes and sorted names).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-.gpu-lab}
BUILD_TOOLS=dev/localcluster/build-tools.sh
PY=${PY:-.venv/bin/python}
"$BUILD_TOOLS" etcd kubernetes helm keda prometheus prometheus-adapter kube-state-metrics
rm -rf "$OUT" && mkdir -p "$OUT/bin"
pack() {  # component binary...
  local dir; dir=$("$BUILD_TOOLS" --bindir "$1"); shift
  mkdir -p "$OUT/bin/$(basename "$dir")"
  for b in "$@"; do xz -9e -T1 -c "$dir/$b" > "$OUT/bin/$(basename "$dir")/$b.xz"; done
}
pack etcd etcd &
pack kubernetes kube-apiserver kube-controller-manager &
pack kubernetes kube-scheduler kubectl &
pack helm helm &
wait
# Scale from zero (the `zero` scenario): KEDA, and the metrics stack KEDA queries (Prometheus,
# prometheus-adapter, kube-state-metrics), as the CPU lab runs them.
pack keda keda &
pack keda keda-adapter &
pack prometheus prometheus &
pack prometheus-adapter adapter &
pack kube-state-metrics kube-state-metrics &
wait
# KEDA's CRDs and RBAC (what its kustomize install applies) and the mark of its loopback build.
keda_dir=$("$BUILD_TOOLS" --bindir keda)
tar -C "$keda_dir" --sort=name --mtime=2026-01-01 --owner=0 --group=0 --numeric-owner \
  -c config keda-adapter.loopback | xz -9e -T1 > "$OUT/bin/$(basename "$keda_dir")/config.tar.xz"
# py-spy, the sampling profiler bench/gpu/start_probe.py runs vLLM's start under (a static binary
# from its PyPI wheel; the machine has no network to fetch it).
PY_SPY=0.4.3
spy=$(mktemp -d)
"$PY" -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_5_x86_64 \
  -d "$spy" "py-spy==$PY_SPY"
(cd "$spy" && unzip -q ./*.whl)
mkdir -p "$OUT/bin/py-spy-$PY_SPY"
xz -9e -T1 -c "$spy"/py_spy-*.data/scripts/py-spy > "$OUT/bin/py-spy-$PY_SPY/py-spy.xz"
rm -rf "$spy"
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
grep -E '^[A-Za-z0-9_.-]+==' operator/requirements.lock | sed 's/[ \\].*//' > "$site/constraints.txt"
# The GPU machine's Python is 3.12 (../shared/gpu/README.md); the operator's own pins, as wheels.
"$PY" -m pip install -q --target "$site/labsite" --python-version 3.12 --implementation cp \
  --abi cp312 --only-binary=:all: --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_28_x86_64 -c "$site/constraints.txt" \
  kopf==1.45.2 kubernetes==34.1.0 pydantic==2.14.3 prometheus-client==0.26.0 PyYAML==6.0.3
# (cryptography stays: the kubernetes client imports google-auth, which imports it.)
rm -rf "$site"/labsite/bin
# The vLLM Router's packages at dev/dataplane/vllm-router.lock's pins, for Python 3.12 (stage.sh
# makes the virtualenv install-vllm-router.sh would have made, over them).
grep -E '^[A-Za-z0-9_.-]+==' dev/dataplane/vllm-router.lock > "$site/router.txt"
"$PY" -m pip install -q --no-deps --target "$site/routersite" --python-version 3.12 \
  --implementation cp --abi cp312 --abi abi3 --only-binary=:all: --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -r "$site/router.txt"
rm -rf "$site"/routersite/bin
find "$site/routersite" -name __pycache__ -prune -exec rm -rf {} +
tar -C "$site" --sort=name --mtime=2026-01-01 --owner=0 --group=0 --numeric-owner -c routersite \
  | xz -9e -T1 > "$OUT/routersite.tar.xz"
find "$site/labsite" -name __pycache__ -prune -exec rm -rf {} +
tar -C "$site" --sort=name --mtime=2026-01-01 --owner=0 --group=0 --numeric-owner -c labsite \
  | xz -9e -T1 > "$OUT/labsite.tar.xz"
(cd "$OUT" && find . -type f ! -name SHA256SUMS | sort | xargs sha256sum > SHA256SUMS)
grep -qxF /.gpu-lab/ .git/info/exclude 2>/dev/null || echo /.gpu-lab/ >> .git/info/exclude
(cd "$OUT" && find . -type f -printf '%s %p\n' | sort -k2)
