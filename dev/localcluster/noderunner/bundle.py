"""The OCI bundle of one container of a built image: the runtime config a kubelet's runtime would
derive from the pod spec (argv, env, user, securityContext, mounts), and its root filesystem."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .volumes import PodVolumes


class ContainerConfigError(Exception):
    """The container cannot be created as specified (a kubelet's CreateContainerConfigError)."""


def argv(spec: Mapping[str, Any], image_config: Mapping[str, Any]) -> list[str]:
    """Kubernetes' rule: `command` replaces the image's Entrypoint (and drops its Cmd), `args`
    replace its Cmd; both after $(VAR) expansion (done by the caller)."""
    command = list(spec.get("command") or [])
    args = list(spec.get("args") or [])
    if command:
        return [*command, *args]
    return [*(image_config.get("Entrypoint") or []), *(args or image_config.get("Cmd") or [])]


def _security(pod: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """The container's securityContext over the pod's (the fields a container may override)."""
    pod_ctx = dict(pod["spec"].get("securityContext") or {})
    return {**pod_ctx, **(spec.get("securityContext") or {})}


@dataclass(frozen=True)
class Request:
    """One container to run: its pod, its spec, and what the runner made of them."""

    pod: Mapping[str, Any]
    spec: Mapping[str, Any]
    args: list[str]  # the process's argv
    env: Mapping[str, str]  # the pod's environment for it (the image's is added)
    mounts: PodVolumes  # mountPath -> host directory


def bundle_config(unpacked: Path, request: Request, rootfs: Path) -> dict[str, Any]:
    """The OCI runtime config of one container (from umoci's, which holds the image's user)."""
    pod, spec, env, mounts = request.pod, request.spec, request.env, request.mounts
    config: dict[str, Any] = json.loads((unpacked / "config.json").read_text())
    process = config["process"]
    security = _security(pod, spec)
    image_env = dict(e.split("=", 1) for e in process.get("env") or [] if "=" in e)
    process["terminal"] = False
    process["args"] = request.args
    # The image's environment, then what the pod sets (it wins, as with a kubelet).
    process["env"] = [f"{k}={v}" for k, v in {**image_env, **env}.items()]
    if spec.get("workingDir"):
        process["cwd"] = spec["workingDir"]
    user = process.setdefault("user", {"uid": 0, "gid": 0})
    if "runAsUser" in security:
        user["uid"] = int(security["runAsUser"])
    if "runAsGroup" in security:
        user["gid"] = int(security["runAsGroup"])
    if security.get("runAsNonRoot") and user["uid"] == 0:
        raise ContainerConfigError("container has runAsNonRoot and image will run as root")
    caps = security.get("capabilities") or {}
    if "ALL" in (caps.get("drop") or []):
        kept: list[str] = []
    else:
        kept = list(process.get("capabilities", {}).get("bounding") or [])
    kept += [f"CAP_{c}" for c in caps.get("add") or [] if f"CAP_{c}" not in kept]
    process["capabilities"] = {
        k: list(kept) for k in ("bounding", "effective", "permitted", "inheritable", "ambient")
    }
    process["noNewPrivileges"] = security.get("allowPrivilegeEscalation", True) is False or (
        process.get("noNewPrivileges", False)
    )
    config["root"] = {"path": str(rootfs), "readonly": bool(security.get("readOnlyRootFilesystem"))}
    config["hostname"] = pod["metadata"]["name"]
    linux = config["linux"]
    # The host's network: pods here bind loopback pod IPs, never a bridge.
    linux["namespaces"] = [ns for ns in linux["namespaces"] if ns["type"] != "network"]
    read_only = {m["mountPath"] for m in spec.get("volumeMounts") or [] if m.get("readOnly")}
    for path, source in sorted(mounts.paths.items()):
        mode = "ro" if path in read_only else "rw"
        config["mounts"].append(
            {"destination": path, "type": "bind", "source": source, "options": ["rbind", mode]}
        )
    return config


def prepare_bundle(unpacked: Path, bundle: Path, request: Request) -> None:
    """Write the container's bundle: its config.json, and its own copy of the image's root
    filesystem only where that is writable (a read-only one is shared)."""
    shutil.rmtree(bundle, ignore_errors=True)
    bundle.mkdir(parents=True)
    rootfs = unpacked / "rootfs"
    if not _security(request.pod, request.spec).get("readOnlyRootFilesystem"):
        subprocess.run(["cp", "-a", str(rootfs), str(bundle / "rootfs")], check=True)
        rootfs = bundle / "rootfs"
    config = bundle_config(unpacked, request, rootfs)
    (bundle / "config.json").write_text(json.dumps(config, indent=1))
