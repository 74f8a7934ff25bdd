#!/usr/bin/env bash
# Runs a command in an image from its OCI archive with crun, as a kubelet's runtime would run the
# container, less what a node adds: umoci unpacks the image into an OCI bundle, whose config
# (the image's user, environment and working directory) gets the command, a read-only root
# filesystem with a tmpfs at /tmp (as the chart runs the operator), and the host's network (no
# network namespace: nothing to route here). Prints what the command printed; exits with its status.
#
#   crun-run.sh ARCHIVE REF COMMAND [ARG...]   (REF: the image name inside the archive)
#
# Needs root (crun, umoci unpack) and python3 (edits the bundle's config.json).
set -euo pipefail

archive=$1 ref=$2
shift 2
work="$(mktemp -d "${TMPDIR:-/tmp}/llmfleet-crun.XXXXXX")"
trap 'rm -rf "$work"' EXIT

mkdir "$work/layout"
tar -C "$work/layout" -xf "$archive"
umoci unpack --image "$work/layout:$ref" "$work/bundle" >/dev/null

python3 - "$work/bundle/config.json" "$@" <<'PY'
import json
import sys

path, args = sys.argv[1], sys.argv[2:]
with open(path) as f:
    config = json.load(f)
config["process"]["terminal"] = False
config["process"]["args"] = args
config["root"]["readonly"] = True
config["mounts"].append(
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]}
)
linux = config["linux"]
linux["namespaces"] = [ns for ns in linux["namespaces"] if ns["type"] != "network"]
with open(path, "w") as f:
    json.dump(config, f)
PY

run=(crun --root "$work/state" --cgroup-manager=disabled run --bundle "$work/bundle"
  "llmfleet-$(basename "$work")")
# crun 1.8 refuses a host whose cgroup v2 hierarchy beside the v1 ones has controllers ("hybrid
# mode"); with cgroups disabled it needs neither, so hide that hierarchy from it, in a mount
# namespace of its own.
if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ] && mountpoint -q /sys/fs/cgroup/unified; then
  run=(unshare --mount --propagation private sh -c 'umount /sys/fs/cgroup/unified && exec "$@"' sh
    "${run[@]}")
fi
timeout 300 "${run[@]}" </dev/null
