# shellcheck shell=bash
# Sourced by build.sh: the stand-in for python:3.11.14-slim-bookworm that buildah builds on where
# no registry is reachable. A minimal Debian bookworm made by mmdebstrap from the Debian mirror
# apt is configured with, with Debian's Python 3.11 (3.11.2, not 3.11.14), pip, and `python` and
# `pip` on PATH as in the official image, imported into a buildah storage of its own under the
# official image's name. Where a registry is reachable, build with Docker (or buildah) and the real
# base is pulled instead.
#
# Needs STORE and log/die from build.sh.

BASE_TAG=docker.io/library/python:3.11.14-slim-bookworm
BASE_SUITE=bookworm
# Pinned like the Makefile's DEB_PACKAGES: a version the mirror no longer has fails the build
# rather than changing the base. The essential packages come at the suite's current versions;
# the base's package list is written beside the archives (base-packages.txt).
BASE_PACKAGES=(
  python3.11=3.11.2-6+deb12u9
  python3=3.11.2-1+b1
  python3-pip=23.0.1+dfsg-1
  python-is-python3=3.11.2-1+deb12u1
  ca-certificates=20250419~deb12u2
  netbase=6.4
)
# Every timestamp in the base (2026-11-25, when the pins were taken): a rebuild with the same
# mirror content gives the same layer.
BASE_EPOCH=1795564800

buildah_() { buildah --root "$STORE/storage" --runroot "$STORE/run" "$@"; }

mirror() {  # mirror ARCHIVE: the URI apt's sources use for .../ARCHIVE (debian, debian-security)
  local uri
  uri="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
      /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v '^[[:space:]]*#' \
      | grep -oE "[a-z+]+://[^[:space:]]+/$1/?([[:space:]]|\$)" | head -n 1 | tr -d '[:space:]')" || true
  uri="${uri:-http://deb.debian.org/$1}"
  echo "${uri%/}"
}

# Why the hooks: merged-usr sets up the merged /usr without the usrmerge package (and the Perl it
# pulls in); the official image's Python has no EXTERNALLY-MANAGED marker, so pip installs
# system-wide as the Dockerfiles expect; resolv.conf and hostname are the host's.
mmdebstrap_args() {  # everything but the output path: the base's recipe, hashed into its key
  local debian security
  debian="$(mirror debian)"
  security="$(mirror debian-security)"
  printf '%s\n' --variant=minbase --mode=root --format=tar \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    "--include=$(IFS=,; echo "${BASE_PACKAGES[*]}")" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    "--customize-hook=rm -f \"\$1\"/etc/resolv.conf \"\$1\"/etc/hostname \"\$1\"/usr/lib/python3.11/EXTERNALLY-MANAGED" \
    "$BASE_SUITE" "deb $debian $BASE_SUITE main" "deb $debian $BASE_SUITE-updates main" \
    "deb $security $BASE_SUITE-security main"
}

base_containerfile() {
  cat <<'EOF'
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
LABEL dev.llmfleet.base="stand-in for python:3.11.14-slim-bookworm: Debian bookworm's python3.11 (mmdebstrap), made by dev/images/base.sh"
CMD ["python3"]
EOF
}

base_key() {
  { mmdebstrap_args; base_containerfile; mmdebstrap --version; } | sha256sum | cut -c1-64
}

ensure_base() {  # the base in buildah's storage under BASE_TAG, made if missing or stale
  local dir recipe
  dir="$STORE/base-$(base_key | cut -c1-12)"
  if [ -f "$dir/image-id" ] && [ "$(buildah_ images --quiet --no-trunc "$BASE_TAG" 2>/dev/null \
      | sed 's/^sha256://')" = "$(sed 's/^sha256://' "$dir/image-id")" ]; then
    cp "$dir/packages.txt" "$OUT/base-packages.txt"
    return 0
  fi
  mkdir -p "$dir"
  if [ ! -f "$dir/rootfs.tar" ]; then
    log "base: mmdebstrap $BASE_SUITE with ${BASE_PACKAGES[*]} (stand-in for $BASE_TAG)"
    mapfile -t recipe < <(mmdebstrap_args)
    # The recipe ends with the suite and its 3 sources: the output path goes between them.
    SOURCE_DATE_EPOCH=$BASE_EPOCH mmdebstrap "${recipe[@]:0:${#recipe[@]}-3}" \
      "$dir/rootfs.tar.tmp" "${recipe[@]: -3}" >"$dir/mmdebstrap.log" 2>&1 \
      || { tail -n 20 "$dir/mmdebstrap.log" >&2; die "base: mmdebstrap failed (log: $dir/mmdebstrap.log)"; }
    # Device nodes stay out of the image (the runtime makes /dev), the directory stays.
    tar --delete --wildcards -f "$dir/rootfs.tar.tmp" './dev/?*'
    tar -xOf "$dir/rootfs.tar.tmp" ./var/lib/dpkg/status \
      | awk '/^Package:/ { p = $2 } /^Version:/ { print p "=" $2 }' | LC_ALL=C sort >"$dir/packages.txt"
    mv "$dir/rootfs.tar.tmp" "$dir/rootfs.tar"
  fi
  base_containerfile >"$dir/Containerfile"
  # shellcheck disable=SC2046  # bud_flags prints separate words
  buildah_ bud $(bud_flags) --timestamp "$BASE_EPOCH" --iidfile "$dir/image-id" \
    -f "$dir/Containerfile" -t "$BASE_TAG" "$dir" >"$dir/bud.log" 2>&1 \
    || { tail -n 20 "$dir/bud.log" >&2; die "base: buildah bud failed (log: $dir/bud.log)"; }
  cp "$dir/packages.txt" "$OUT/base-packages.txt"
  log "base: $BASE_TAG ($(wc -l <"$dir/packages.txt") Debian packages) in buildah's storage $STORE/storage"
}

wipe_store() {
  if [ -d "$STORE/storage" ]; then
    buildah_ rm --all >/dev/null 2>&1 || true
    buildah_ rmi --all --force >/dev/null 2>&1 || true
  fi
  rm -rf "$STORE"
}
