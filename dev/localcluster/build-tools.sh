#!/usr/bin/env bash
# Builds the local cluster's components from upstream Go modules at pinned versions into a cache
# outside the work tree, keyed by version, so a second run rebuilds nothing.
#   usage: build-tools.sh [component ...]   (default: the cluster's and the metrics stack's; versitygw
#   only when named, by the tests that start it)
set -euo pipefail

# Pinned versions: the single place to bump them.
K8S_VERSION=v1.34.4
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
HELM_VERSION=v3.22.0
PROM_ADAPTER_VERSION=v0.12.0
# The metrics stack's scraper. Debian's prometheus (same version; promtool comes from it) is built
# without kubernetes_sd_configs, so the stack builds Prometheus from its Go module (tag v2.42.0 is
# module version v0.42.0).
PROMETHEUS_VERSION=v2.42.0
# v2.17.0 is refused by the Go module proxy here ("This module version is not available") and
# v2.16.0 has no checksum-database entry there: v2.15.0 is the newest that verifies.
KSM_VERSION=v2.15.0
# LeaderWorkerSet: the controller that multi-node layouts run on (issue 18), and its CRD, RBAC and
# webhook configurations from the same module.
LWS_VERSION=v0.7.0
# KEDA: scales an LLMDeployment with autoscaling.minReplicas 0 to zero and back (issue 20); its
# operator (ScaledObject controller) and metrics adapter (external.metrics.k8s.io), and its CRDs
# and ClusterRoles from the same module.
KEDA_VERSION=v2.21.0
# versitygw: a real S3 API server over a local directory, the object store the adapter fetcher's
# tests read from (issue 30). Not part of the cluster: built only when a test asks for it.
VERSITYGW_VERSION=v1.8.0

CACHE="${LLMFLEET_CACHE:-$HOME/.cache/llmfleet}"
export GOFLAGS="-mod=mod -trimpath"
export CGO_ENABLED=0
export GOTOOLCHAIN=local

log() { printf '[build-tools] %s\n' "$*" >&2; }

have() {  # have DIR BIN... : every binary already built for this version
  local dir=$1; shift
  for b in "$@"; do [ -x "$dir/$b" ] || return 1; done
}

build_kubernetes() {
  local out="$CACHE/bin/kubernetes-$K8S_VERSION"
  have "$out" kube-apiserver kube-controller-manager kube-scheduler kubectl && return 0
  log "building kubernetes $K8S_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)"
  local mod="$CACHE/src/kubernetes-$K8S_VERSION"
  rm -rf "$mod"; mkdir -p "$mod" "$out.tmp"
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local patch=${K8S_VERSION##*.}
  local staging="v0.$minor.$patch"
  # k8s.io/kubernetes replaces its staging modules with ./staging paths; map each to its published tag.
  local upstream_gomod
  upstream_gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module llmfleet.dev/localcluster/kubernetes"
    echo
    echo "go 1.24"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    grep -E '^\s*k8s\.io/[^ ]+ => \./staging/' "$upstream_gomod" \
      | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
  } > "$mod/go.mod"
  log "wrapper module has $(grep -c '^replace' "$mod/go.mod") staging replaces"
  local ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$mod" && go build -ldflags "$ldflags" -o "$out.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl)
  rm -rf "$out"; mv "$out.tmp" "$out"
}

build_etcd() {
  local out="$CACHE/bin/etcd-$ETCD_VERSION"
  have "$out" etcd && return 0
  log "building etcd $ETCD_VERSION"
  local mod="$CACHE/src/etcd-$ETCD_VERSION"
  rm -rf "$mod"; mkdir -p "$mod" "$out.tmp"
  cat > "$mod/go.mod" <<GOMOD
module llmfleet.dev/localcluster/etcd

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GOMOD
  cat > "$mod/main.go" <<'GO'
// The etcd server's own entry point, built from its published module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$mod" && go build -ldflags "-s -w" -o "$out.tmp/etcd" .)
  rm -rf "$out"; mv "$out.tmp" "$out"
}

go_install() {  # go_install NAME VERSION LDFLAGS PKG...
  local name=$1 version=$2 ldflags=$3; shift 3
  local out="$CACHE/bin/$name-$version${KEY_SUFFIX:-}"
  local bins=(); for p in "$@"; do bins+=("${p##*/}"); done
  have "$out" "${bins[@]}" && return 0
  log "building $name $version"
  mkdir -p "$out.tmp"
  local pkgs=(); for p in "$@"; do pkgs+=("$p@$version"); done
  GOBIN="$out.tmp" go install -ldflags "-s -w $ldflags" "${pkgs[@]}"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

build_kwok() {
  go_install kwok "$KWOK_VERSION" "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
  local out="$CACHE/bin/kwok-$KWOK_VERSION"
  [ -s "$out/stages.yaml" ] && return 0
  # kwok itself has no default stages: take upstream's "fast" node and pod stages, plus the node
  # heartbeat, from the same pinned module.
  local dir
  dir=$(cd "$CACHE" && GOFLAGS= go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  local stage="$dir/kustomize/stage"
  for f in "$stage/node/fast/node-initialize.yaml" "$stage/node/heartbeat/node-heartbeat.yaml" \
           "$stage"/pod/fast/pod-*.yaml; do
    echo "---"; cat "$f"
  done > "$out/stages.yaml.tmp"
  mv "$out/stages.yaml.tmp" "$out/stages.yaml"
}
build_helm() {
  # Like upstream's release build, stamp the Kubernetes version `helm template` assumes offline
  # (else v1.20, and charts with a kubeVersion constraint fail to render).
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  KEY_SUFFIX="-k8s1.$minor" go_install helm "$HELM_VERSION" \
    "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor" \
    helm.sh/helm/v3/cmd/helm
}
go_wrap_build() {  # go_wrap_build NAME MODULE VERSION LDFLAGS PKG BIN [GO.MOD LINES]
  # Build one command of a published module through a wrapper module that requires it (like
  # etcd above), not `go install PKG@VERSION`: that also asks the proxy for the module's version
  # list (to look for a deprecation notice), which the proxy refuses for these modules.
  local name=$1 module=$2 version=$3 ldflags=$4 pkg=$5 bin=$6 extra=${7:-}
  local out="$CACHE/bin/$name-$version"
  have "$out" "$bin" && return 0
  log "building $name $version"
  local mod="$CACHE/src/$name-$version"
  rm -rf "$mod"; mkdir -p "$mod" "$out.tmp"
  printf 'module llmfleet.dev/localcluster/%s\n\ngo 1.24\n\nrequire %s %s\n' \
    "$name" "$module" "$version" > "$mod/go.mod"
  # A dependency's own replace directives do not apply in another module: repeat those it needs.
  [ -z "$extra" ] || printf '\n%s\n' "$extra" >> "$mod/go.mod"
  (cd "$mod" && go build -ldflags "-s -w $ldflags" -o "$out.tmp/$bin" "$pkg")
  rm -rf "$out"; mv "$out.tmp" "$out"
}
build_prometheus_adapter() {
  go_wrap_build prometheus-adapter sigs.k8s.io/prometheus-adapter "$PROM_ADAPTER_VERSION" "" \
    sigs.k8s.io/prometheus-adapter/cmd/adapter adapter
}
build_prometheus() {
  go_wrap_build prometheus github.com/prometheus/prometheus "v0.${PROMETHEUS_VERSION#v2.}" \
    "-X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v} -X github.com/prometheus/common/version.Branch=HEAD" \
    github.com/prometheus/prometheus/cmd/prometheus prometheus \
    "replace k8s.io/klog => github.com/simonpasquier/klog-gokit v0.3.0
replace k8s.io/klog/v2 => github.com/simonpasquier/klog-gokit/v3 v3.0.0"
}
build_kube_state_metrics() {
  go_wrap_build kube-state-metrics k8s.io/kube-state-metrics/v2 "$KSM_VERSION" \
    "-X github.com/prometheus/common/version.Version=${KSM_VERSION#v}" \
    k8s.io/kube-state-metrics/v2 kube-state-metrics
}
build_versitygw() {
  go_wrap_build versitygw github.com/versity/versitygw "$VERSITYGW_VERSION" \
    "-X main.Version=$VERSITYGW_VERSION -X main.Build=release -X main.BuildTime=1970-01-01T00:00:00Z" \
    github.com/versity/versitygw/cmd/versitygw versitygw
}

build_lws() {
  go_wrap_build lws sigs.k8s.io/lws "$LWS_VERSION" \
    "-X sigs.k8s.io/lws/pkg/version.GitVersion=$LWS_VERSION" \
    sigs.k8s.io/lws/cmd lws-controller-manager
  local out="$CACHE/bin/lws-$LWS_VERSION"
  [ -s "$out/config/crd/leaderworkersets.yaml" ] && return 0
  # What upstream's kustomize install applies, from the module the binary was built from: the CRD,
  # the manager's ClusterRoles and the webhook configurations with the patches that scope the pod
  # webhooks to LeaderWorkerSet pods. The supervisor points them at 127.0.0.1.
  local dir
  dir=$(cd "$CACHE" && GOFLAGS= go mod download -json "sigs.k8s.io/lws@$LWS_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$out/config.tmp"; mkdir -p "$out/config.tmp/crd" "$out/config.tmp/rbac" "$out/config.tmp/webhook"
  cp "$dir/config/rbac/role.yaml" "$dir/config/rbac/auth_proxy_role.yaml" "$out/config.tmp/rbac/"
  cp "$dir/config/webhook/manifests.yaml" "$dir/config/webhook/mutating-patch.yaml" \
     "$dir/config/webhook/validating-patch.yaml" "$out/config.tmp/webhook/"
  cp "$dir/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml" \
     "$out/config.tmp/crd/leaderworkersets.yaml"
  chmod -R u+w "$out/config.tmp"  # copies of the read-only module cache
  rm -rf "$out/config"; mv "$out/config.tmp" "$out/config"
}

# KEDA's metrics adapter serves its own /metrics on ":<port>", every interface, with no flag to
# change it; the local cluster listens on loopback only. So the adapter is built from upstream's
# cmd/adapter/main.go with that one address changed to 127.0.0.1:<port> (a package of the build
# module: nothing under cmd/adapter is internal). Fails if the line is not there to patch.
build_keda_adapter() {  # build_keda_adapter MODULE_DIR OUT_DIR LDFLAGS
  local mod=$1 out=$2 ldflags=$3 src
  src="$(cd "$mod" && go list -m -f '{{.Dir}}' github.com/kedacore/keda/v2)/cmd/adapter/main.go"
  mkdir -p "$mod/adapter"
  sed 's|fmt.Sprintf(":%v", metricsAPIServerPort)|fmt.Sprintf("127.0.0.1:%v", metricsAPIServerPort)|' \
    "$src" > "$mod/adapter/main.go"
  if ! grep -q 'Sprintf("127.0.0.1:%v", metricsAPIServerPort)' "$mod/adapter/main.go"; then
    log "keda: the adapter's metrics bind address is not where it was in $src"; return 1
  fi
  (cd "$mod" && go build -ldflags "$ldflags" -o "$out/keda-adapter.tmp" ./adapter)
  mv "$out/keda-adapter.tmp" "$out/keda-adapter"
  touch "$out/keda-adapter.loopback"
}

build_keda() {
  local out="$CACHE/bin/keda-$KEDA_VERSION"
  local mod="$CACHE/src/keda-$KEDA_VERSION"
  local ldflags="-s -w -X github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v}"
  if ! have "$out" keda keda-adapter; then
    log "building keda $KEDA_VERSION (operator, metrics adapter)"
    rm -rf "$mod" "$out.tmp"; mkdir -p "$mod" "$out.tmp"
    # Upstream's own replace (a dependency's replaces do not apply in another module).
    printf 'module llmfleet.dev/localcluster/keda\n\ngo 1.26\n\nrequire github.com/kedacore/keda/v2 %s\n\n%s\n' \
      "$KEDA_VERSION" \
      "replace github.com/nexus-rpc/nexus-proto-annotations v0.1.0 => github.com/nexus-rpc/nexus-proto-annotations v0.1.1-0.20260629224316-835bd8d49cb4" \
      > "$mod/go.mod"
    (cd "$mod" && go build -ldflags "$ldflags" -o "$out.tmp/keda" github.com/kedacore/keda/v2/cmd/operator)
    build_keda_adapter "$mod" "$out.tmp" "$ldflags"
    rm -rf "$out"; mv "$out.tmp" "$out"
  elif [ ! -e "$out/keda-adapter.loopback" ]; then
    # Built before the adapter was patched (its metrics on every interface): rebuild it alone.
    log "rebuilding keda-adapter $KEDA_VERSION (metrics on 127.0.0.1)"
    [ -s "$mod/go.mod" ] || { log "keda: $mod/go.mod missing; remove $out to rebuild all"; return 1; }
    build_keda_adapter "$mod" "$out" "$ldflags"
  fi
  [ -s "$out/config/crd/keda.sh_scaledobjects.yaml" ] && return 0
  # What upstream's kustomize install applies besides the Deployments: the CRDs and the
  # ClusterRoles of the operator and the metrics server.
  local dir
  dir=$(cd "$CACHE" && GOFLAGS= go mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$out/config.tmp"; mkdir -p "$out/config.tmp/crd" "$out/config.tmp/rbac"
  cp "$dir"/config/crd/bases/*.yaml "$out/config.tmp/crd/"
  cp "$dir/config/rbac/role.yaml" "$out/config.tmp/rbac/operator-role.yaml"
  cp "$dir/config/metrics-server/role.yaml" "$out/config.tmp/rbac/metrics-server-role.yaml"
  chmod -R u+w "$out/config.tmp"
  rm -rf "$out/config"; mv "$out/config.tmp" "$out/config"
}

# Print the bin directory of a component (for the Makefile and the cluster supervisor).
bindir() {
  case $1 in
    kubernetes) echo "$CACHE/bin/kubernetes-$K8S_VERSION" ;;
    etcd) echo "$CACHE/bin/etcd-$ETCD_VERSION" ;;
    kwok) echo "$CACHE/bin/kwok-$KWOK_VERSION" ;;
    helm) local minor=${K8S_VERSION#v1.}; echo "$CACHE/bin/helm-$HELM_VERSION-k8s1.${minor%%.*}" ;;
    prometheus-adapter) echo "$CACHE/bin/prometheus-adapter-$PROM_ADAPTER_VERSION" ;;
    kube-state-metrics) echo "$CACHE/bin/kube-state-metrics-$KSM_VERSION" ;;
    prometheus) echo "$CACHE/bin/prometheus-v0.${PROMETHEUS_VERSION#v2.}" ;;
    lws) echo "$CACHE/bin/lws-$LWS_VERSION" ;;
    keda) echo "$CACHE/bin/keda-$KEDA_VERSION" ;;
    versitygw) echo "$CACHE/bin/versitygw-$VERSITYGW_VERSION" ;;
    *) echo "unknown component $1" >&2; return 2 ;;
  esac
}

if [ "${1:-}" = "--bindir" ]; then bindir "$2"; exit; fi
if [ "${1:-}" = "--versions" ]; then
  printf 'K8S_VERSION=%s\nETCD_VERSION=%s\nKWOK_VERSION=%s\nHELM_VERSION=%s\nPROM_ADAPTER_VERSION=%s\nKSM_VERSION=%s\nPROMETHEUS_VERSION=%s\nLWS_VERSION=%s\nKEDA_VERSION=%s\nVERSITYGW_VERSION=%s\n' \
    "$K8S_VERSION" "$ETCD_VERSION" "$KWOK_VERSION" "$HELM_VERSION" "$PROM_ADAPTER_VERSION" "$KSM_VERSION" "$PROMETHEUS_VERSION" "$LWS_VERSION" "$KEDA_VERSION" "$VERSITYGW_VERSION"
  exit
fi
mkdir -p "$CACHE/bin"
exec 9>"$CACHE/.build.lock"
flock 9  # one build at a time: make, tests and a second shell may all ask at once
components=("$@")
[ ${#components[@]} -gt 0 ] || components=(etcd kubernetes kwok lws keda helm prometheus prometheus-adapter kube-state-metrics)
start=$(date +%s)
for c in "${components[@]}"; do
  t0=$(date +%s)
  built_before=$(ls "$CACHE/bin" | wc -l)
  "build_${c//-/_}"
  # Record how long a real build took (not a cache hit), for dev/README.md and bench/results.json.
  if [ "$(ls "$CACHE/bin" | wc -l)" != "$built_before" ]; then
    echo "$c $(( $(date +%s) - t0 ))" >> "$CACHE/build-times.txt"
  fi
done
log "done in $(( $(date +%s) - start ))s"
