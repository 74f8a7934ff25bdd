#!/usr/bin/env bash
# Builds the operator and router images from images/operator/Dockerfile and
# images/router/Dockerfile into OCI archives (how to push them: images/README.md):
#   build/images/operator.oci.tar   docker.io/llmfleet/operator:<the chart's appVersion>
#   build/images/adapter-fetcher.oci.tar
#                                   the same image as docker.io/llmfleet/adapter-fetcher:<the
#                                   chart's llmfleet.dev/adapter-fetcher-version>
#   build/images/router-hop.oci.tar
#                                   the same image as docker.io/llmfleet/router-hop:<the chart's
#                                   llmfleet.dev/router-hop-version>
#   build/images/router.oci.tar     the operator's DEFAULT_ROUTER_IMAGE
# With Docker where its daemon answers (`docker info`); otherwise without a daemon, with Debian's
# buildah on a stand-in for the Dockerfiles' base made from Debian's archive (base.sh), since no
# container registry is reachable on the machines this project is developed on. Each image is
# smoke-run from its archive with a real OCI runtime (crun) before it counts as built; a stamp
# beside the archive holds the hash of everything the build read, so a second run with nothing
# changed does nothing.
#
#   build.sh [IMAGE...]          build what changed (IMAGE: operator, router; default: both)
#   build.sh --smoke IMAGE       run IMAGE's smoke command from its archive, print what it printed
#   build.sh --print-path IMAGE  print the archive's path
#   build.sh --print-tag IMAGE   print the name the image has inside its archive
#   build.sh --wipe              delete the build cache (the base image, buildah's storage)
#
# LLMFLEET_CACHE (default ~/.cache/llmfleet; this uses its images/), LLMFLEET_IMAGES_OUT (default
# build/images in the work tree), LLMFLEET_IMAGE_BUILDER (docker or buildah; default: docker if
# its daemon answers).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
STORE="${LLMFLEET_CACHE:-$HOME/.cache/llmfleet}/images"
OUT="${LLMFLEET_IMAGES_OUT:-$REPO/build/images}"
IMAGES=(operator router)

# The smoke commands, the one place they live. The operator's becomes `llmfleet --version` once
# that flag is merged.
# shellcheck disable=SC2034  # read through `local -n cmd=SMOKE_<image>`
SMOKE_operator=(llmfleet --version)
# shellcheck disable=SC2034
SMOKE_router=(vllm-router --help)

# The adapter fetcher and the router hop run from the operator's image, each under a name whose
# tag is its own version: LoRA engine pod templates name the first, the router pods of
# LLMDeployments with adapters the second, so neither may move with the operator's release.
# Saved beside the operator's archive from the same build; not built on their own.
# shellcheck disable=SC2034  # read through ALIAS_<image>
ALIAS_operator="adapter-fetcher router-hop"

log() { printf '[images] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

tag_of() {
  case "$1" in
    operator)
      echo "docker.io/llmfleet/operator:$(sed -n 's/^appVersion: *"\{0,1\}\([^" ]*\)"\{0,1\} *$/\1/p' \
        "$REPO/charts/llmfleet/Chart.yaml")" ;;
    adapter-fetcher|router-hop)
      echo "docker.io/llmfleet/$1:$(sed -n \
        "s/^ *llmfleet\.dev\/$1-version: *\"\{0,1\}\([^\" ]*\)\"\{0,1\} *\$/\1/p" \
        "$REPO/charts/llmfleet/Chart.yaml")" ;;
    router)
      sed -n 's/^DEFAULT_ROUTER_IMAGE = "\(.*\)"$/\1/p' "$REPO/operator/src/llmfleet/models/router.py" ;;
    *) die "unknown image $1 (choose from: ${IMAGES[*]})" ;;
  esac
}

dockerfile_of() { echo "images/$1/Dockerfile"; }

copied() {  # copied DOCKERFILE: the build-context paths its COPY lines read
  sed -n 's/^COPY[[:space:]]\+//p' "$REPO/$1" \
    | awk '{ n = 0; for (i = 1; i <= NF; i++) if ($i !~ /^--/) w[++n] = $i; for (i = 1; i < n; i++) print w[i] }'
}

inputs() {  # inputs IMAGE: every file the build reads, as .dockerignore lets them through
  local df
  df="$(dockerfile_of "$1")"
  # shellcheck disable=SC2046  # one path per word
  (cd "$REPO" && find "$df" .dockerignore $(copied "$df") -type f \
      ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' | LC_ALL=C sort)
}

source_date_epoch() {  # the last commit of IMAGE's inputs: fixes every timestamp in the image
  local files
  mapfile -t files < <(inputs "$1")
  git -C "$REPO" log -1 --format=%ct -- "${files[@]}" 2>/dev/null || echo 0
}

builder() {
  if [ -n "${LLMFLEET_IMAGE_BUILDER:-}" ]; then
    echo "$LLMFLEET_IMAGE_BUILDER"
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    echo docker
  else
    echo buildah
  fi
}

key_of() {  # key_of IMAGE EPOCH: hash of the builder, the base and every input of the build
  local files
  mapfile -t files < <(inputs "$1")
  {
    echo "$BUILDER $2"
    [ "$BUILDER" = buildah ] && base_key
    cat "$HERE/build.sh" "$HERE/base.sh" "$HERE/crun-run.sh" | sha256sum
    (cd "$REPO" && sha256sum "${files[@]}")
  } | sha256sum | cut -c1-64
}

# buildah 1.28 as root without CAP_SYS_RESOURCE (as here): no bridge network ever (--network=host),
# chroot isolation, and rlimits no higher than this process may set: nofile at our hard limit,
# nproc at buildah's own default of 32768 (it sets that first and cannot raise it afterwards).
bud_flags() {
  local nproc
  nproc="$(ulimit -Hu)"
  [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
  echo --pull=never --isolation=chroot --network=host --identity-label=false \
    --ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=$nproc:$nproc"
}

# shellcheck source=SCRIPTDIR/base.sh
. "$HERE/base.sh"

build_buildah() {  # build_buildah IMAGE TAG EPOCH ARCHIVE LOG
  local name=$1 tag=$2 epoch=$3 archive=$4 buildlog=$5 df foreign iid
  df="$(dockerfile_of "$name")"
  # Every FROM must be the base made here or an earlier stage.
  foreign="$(awk 'toupper($1) == "FROM" { print $2; if (toupper($3) == "AS") print "stage", $4 }' \
      "$REPO/$df" | while read -r from stage; do
        [ "$from" = stage ] && stages+=" $stage " && continue
        [[ "docker.io/library/$from" = "$BASE_TAG" || "${stages:-}" = *" $from "* ]] || echo "$from"
      done)"
  [ -z "$foreign" ] || die "$name: cannot build on $foreign here: only $BASE_TAG is made locally"
  ensure_base
  # The host's CA bundle, read-only and for RUN steps only (it is not committed): pip inside the
  # build trusts what the host trusts, such as a TLS-inspecting egress proxy's CA.
  local ca=()
  [ -f /etc/ssl/certs/ca-certificates.crt ] \
    && ca=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
  # shellcheck disable=SC2046  # bud_flags prints separate words
  buildah_ bud $(bud_flags) "${ca[@]}" --timestamp "$epoch" --build-arg "SOURCE_DATE_EPOCH=$epoch" \
    --iidfile "$OUT/.$name.iid" -f "$df" -t "$tag" "$REPO" >"$buildlog" 2>&1 \
    || { tail -n 40 "$buildlog" >&2; die "$name: buildah bud failed (log: $buildlog)"; }
  iid="$(cat "$OUT/.$name.iid")"
  rm -f "$archive"
  buildah_ push --quiet "$iid" "oci-archive:$archive:$tag" >>"$buildlog" 2>&1 \
    || { tail -n 20 "$buildlog" >&2; die "$name: buildah push failed (log: $buildlog)"; }
  local alias="ALIAS_$name" a
  for a in ${!alias:-}; do
    rm -f "$OUT/$a.oci.tar"
    buildah_ push --quiet "$iid" "oci-archive:$OUT/$a.oci.tar:$(tag_of "$a")" \
      >>"$buildlog" 2>&1 \
      || { tail -n 20 "$buildlog" >&2; die "$a: buildah push failed (log: $buildlog)"; }
  done
  rm -f "$OUT/.$name.iid"
  # Older images of this tag, no longer tagged, would pile up in the storage.
  buildah_ rmi --prune >/dev/null 2>&1 || true
}

build_docker() {  # build_docker IMAGE TAG EPOCH ARCHIVE LOG
  local name=$1 tag=$2 epoch=$3 archive=$4 buildlog=$5
  # BuildKit reads the Dockerfiles' RUN --mount; SOURCE_DATE_EPOCH as in the buildah path.
  DOCKER_BUILDKIT=1 docker build --build-arg "SOURCE_DATE_EPOCH=$epoch" \
    -f "$REPO/$(dockerfile_of "$name")" -t "$tag" "$REPO" >"$buildlog" 2>&1 \
    || { tail -n 40 "$buildlog" >&2; die "$name: docker build failed (log: $buildlog)"; }
  # Docker 25 and later save an OCI image layout (earlier ones the docker-archive format).
  docker save -o "$archive" "$tag"
  local alias="ALIAS_$name" a
  for a in ${!alias:-}; do
    docker tag "$tag" "$(tag_of "$a")"
    docker save -o "$OUT/$a.oci.tar" "$(tag_of "$a")"
  done
}

smoke() {  # smoke IMAGE ARCHIVE: run the smoke command in the image, print its output
  local name=$1 archive=$2
  local -n cmd="SMOKE_$name"
  # Docker's saved archive names the image differently (containerd's annotation): run it there.
  if [ "$BUILDER" = docker ]; then
    timeout 300 docker run --rm --network=host --read-only --tmpfs /tmp \
      --entrypoint "${cmd[0]}" "$(tag_of "$name")" "${cmd[@]:1}"
  else
    "$HERE/crun-run.sh" "$archive" "$(tag_of "$name")" "${cmd[@]}"
  fi
}

build() {  # build IMAGE: build, smoke-run and stamp IMAGE unless its stamp is current
  local name=$1 tag epoch key archive stamp start out
  tag="$(tag_of "$name")"
  epoch="$(source_date_epoch "$name")"
  key="$(key_of "$name" "$epoch")"
  archive="$OUT/$name.oci.tar"
  stamp="$OUT/$name.stamp"
  local alias="ALIAS_$name" a aliases_saved=1
  for a in ${!alias:-}; do [ -f "$OUT/$a.oci.tar" ] || aliases_saved=0; done
  if [ -f "$archive" ] && [ "$aliases_saved" = 1 ] \
      && [ "$(cat "$stamp" 2>/dev/null)" = "$key" ]; then
    log "$name: up to date ($archive)"
    return 0
  fi
  rm -f "$stamp"
  start=$(date +%s)
  log "$name: building $tag with $BUILDER (log: $OUT/$name.log)"
  "build_$BUILDER" "$name" "$tag" "$epoch" "$archive" "$OUT/$name.log"
  out="$(smoke "$name" "$archive")" || die "$name: smoke command failed: ${out:-no output}"
  local -n cmd="SMOKE_$name"
  log "$name: smoke \`${cmd[*]}\` ok: $(head -n 1 <<<"$out")"
  echo "$key" >"$stamp"
  log "$name: $archive ($(( $(stat -c %s "$archive") / 1048576 )) MiB, $tag, manifest $(
    tar -xOf "$archive" index.json 2>/dev/null | grep -o 'sha256:[0-9a-f]*' | head -n 1)) in $(( $(date +%s) - start ))s"
}

not_built_here() {
  local engine
  engine="$(awk 'toupper($1) == "FROM" { b = $2 } END { print b }' "$REPO/images/vllm/Dockerfile")"
  log "vllm (images/vllm/Dockerfile, the engine and batch image): not built: its base $engine"
  log "  comes from Docker Hub, which no machine of this project reaches; where a registry is"
  log "  reachable, build it with the command in images/vllm/README.md"
}

main() {
  case "${1:-}" in
    --print-path) tag_of "${2:?image}" >/dev/null; echo "$OUT/$2.oci.tar"; return 0 ;;
    --print-tag) tag_of "${2:?image}"; return 0 ;;
    --wipe) wipe_store; return 0 ;;
    --smoke)
      BUILDER="$(builder)"
      tag_of "${2:?image}" >/dev/null
      [ -f "$OUT/$2.oci.tar" ] || die "$2: no archive at $OUT/$2.oci.tar: run make images"
      smoke "$2" "$OUT/$2.oci.tar"
      return ;;
    -*) sed -n '2,24s/^# \{0,1\}//p' "$0" >&2; return 2 ;;
  esac
  local names=("$@")
  [ ${#names[@]} -gt 0 ] || names=("${IMAGES[@]}")
  for n in "${names[@]}"; do
    case "$n" in adapter-fetcher|router-hop) die "$n is built with the operator: build.sh operator" ;; esac
    tag_of "$n" >/dev/null
  done
  BUILDER="$(builder)"
  mkdir -p "$OUT" "$STORE"
  if [ "$BUILDER" = buildah ]; then
    [ "$(id -u)" = 0 ] || die "building without Docker needs root (mmdebstrap, buildah, crun)"
    exec 9>"$STORE/.lock"
    flock 9  # one build at a time per cache: the base and buildah's storage are shared
  fi
  for n in "${names[@]}"; do build "$n"; done
  not_built_here
}

main "$@"
