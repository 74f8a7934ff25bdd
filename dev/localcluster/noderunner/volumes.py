"""Volumes of a pod on the local node, emulated with directories (no mounts: the process sees the
host's filesystem, so paths under a volumeMount are rewritten to the emulated directory).

* persistentVolumeClaim -> `<state dir>/pvcs/<namespace>/<claim>/`, shared by every pod of the
  namespace that mounts the claim and kept after the pods go (as a volume outlives its pods);
* configMap -> a fresh directory with one file per key (or per `items` entry), from the API;
* emptyDir -> a fresh directory, writable by any user (as a kubelet makes it), removed with the
  pod;
* projected (the ServiceAccount token volume the API server adds to pods) -> a directory with its
  files: a token from the TokenRequest API bound to the pod, ConfigMap keys (the cluster CA) and
  downward API fields (the namespace); only for containers run from a built image (oci.py), whose
  in-cluster config reads them, and only when the runner passes `request_token`;
* terminationMessagePath -> a file of the pod's, read into `state.terminated.message` when the
  container ends (FallbackToLogsOnError: the log's tail when it is empty and the exit failed).

Other volume types are not emulated: their mountPath is left as is.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
TERMINATION_MESSAGE_LIMIT = 4096
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
# Starts the lines the runner itself writes into a pod's log (podstart.py), which are no
# container's output; `RUNNER_HEADER + <time> node-runner: start NAME ...` begins an instance.
RUNNER_HEADER = "===== "

ReadConfigMap = Callable[[str, str], Mapping[str, str] | None]  # namespace, name -> data
# A token of the pod's ServiceAccount bound to the pod: (expirationSeconds, audience) -> token.
RequestToken = Callable[[int, str | None], str]
DEFAULT_FILE_MODE = 0o644  # a volume's defaultMode when unset


class VolumeNotReadyError(Exception):
    """A volume's source is missing (e.g. the ConfigMap): the container waits, as with a kubelet."""


@dataclass
class PodVolumes:
    """Container paths -> host paths for one container of one pod."""

    paths: dict[str, str] = field(default_factory=dict)  # mountPath -> host directory
    termination_log: Path | None = None

    def rewrite(self, value: str) -> str:
        """`value` (or the value of `--flag=value`) with a mounted path mapped to the host."""
        flag, eq, rest = value.partition("=")
        if eq and flag.startswith("-"):
            return f"{flag}={self.rewrite(rest)}"
        for mount in sorted(self.paths, key=len, reverse=True):
            if value == mount or value.startswith(mount.rstrip("/") + "/"):
                return self.paths[mount] + value[len(mount.rstrip("/")) :]
        return value


def pvc_dir(state_dir: Path, namespace: str, claim: str) -> Path:
    return state_dir / "pvcs" / namespace / claim


def pod_dir(state_dir: Path, uid: str) -> Path:
    return state_dir / "volumes" / uid


def prepare(
    pod: dict[str, Any],
    container: dict[str, Any],
    state_dir: Path,
    read_configmap: ReadConfigMap,
    request_token: RequestToken | None = None,
) -> PodVolumes:
    """Create the host directories of `container`'s mounts; raise VolumeNotReadyError when a
    source is missing."""
    meta = pod["metadata"]
    ns, uid = meta["namespace"], meta["uid"]
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    out = PodVolumes()
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            continue
        host: Path | None = None
        if "projected" in volume:
            if request_token is None:
                continue
            host = _projected(volume, pod, state_dir, read_configmap, request_token)
        else:
            host = _materialise(volume, ns, uid, state_dir, read_configmap)
        if host is None:
            continue
        sub = mount.get("subPath")
        out.paths[mount["mountPath"]] = str(host / sub if sub else host)
    log_path = container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
    out.termination_log = pod_dir(state_dir, uid) / f"termination-{container['name']}.log"
    out.termination_log.parent.mkdir(parents=True, exist_ok=True)
    out.termination_log.write_bytes(b"")
    out.termination_log.chmod(0o666)  # the container's user writes it (a kubelet's mode)
    out.paths[log_path] = str(out.termination_log)
    return out


def _materialise(
    volume: dict[str, Any], ns: str, uid: str, state_dir: Path, read_configmap: ReadConfigMap
) -> Path | None:
    name = str(volume["name"])
    if "persistentVolumeClaim" in volume:
        path = pvc_dir(state_dir, ns, str(volume["persistentVolumeClaim"]["claimName"]))
        path.mkdir(parents=True, exist_ok=True)
        return path
    if "emptyDir" in volume:
        path = pod_dir(state_dir, uid) / "emptydir" / name
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)  # a container's own user writes it, whoever that is
        return path
    if "configMap" in volume:
        source = volume["configMap"]
        data = read_configmap(ns, source["name"])
        if data is None:
            if source.get("optional"):
                data = {}
            else:
                raise VolumeNotReadyError(f'configmap "{source["name"]}" not found')
        path = pod_dir(state_dir, uid) / "configmap" / name
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        items = source.get("items") or [{"key": k, "path": k} for k in data]
        for item in items:
            if item["key"] not in data:
                raise VolumeNotReadyError(
                    f'configmap "{source["name"]}" has no key "{item["key"]}"'
                )
            target = path / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(data[item["key"]])
        return path
    return None


def _projected(
    volume: dict[str, Any],
    pod: dict[str, Any],
    state_dir: Path,
    read_configmap: ReadConfigMap,
    request_token: RequestToken,
) -> Path:
    meta = pod["metadata"]
    source = volume["projected"]
    files: dict[str, str] = {}
    for item in source.get("sources") or []:
        if "serviceAccountToken" in item:
            sat = item["serviceAccountToken"]
            seconds = int(sat.get("expirationSeconds") or 3600)
            files[sat["path"]] = request_token(seconds, sat.get("audience"))
        elif "configMap" in item:
            ref = item["configMap"]
            data = read_configmap(meta["namespace"], ref["name"])
            if data is None and not ref.get("optional"):
                raise VolumeNotReadyError(f'configmap "{ref["name"]}" not found')
            for key in ref.get("items") or [{"key": k, "path": k} for k in data or {}]:
                if data and key["key"] in data:
                    files[key["path"]] = data[key["key"]]
        elif "downwardAPI" in item:
            for entry in item["downwardAPI"].get("items") or []:
                field = (entry.get("fieldRef") or {}).get("fieldPath", "")
                section, _, name = field.partition(".")
                if section == "metadata" and isinstance(meta.get(name), str):
                    files[entry["path"]] = meta[name]
    path = pod_dir(state_dir, meta["uid"]) / "projected" / str(volume["name"])
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    mode = int(source.get("defaultMode") or DEFAULT_FILE_MODE)
    for name, content in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(mode)
    return path


def termination_message(
    volumes: PodVolumes | None, exit_code: int, policy: str | None, log_path: Path
) -> str:
    """What the kubelet puts into `terminated.message`."""
    message = ""
    if volumes is not None and volumes.termination_log is not None:
        try:
            message = volumes.termination_log.read_bytes()[:TERMINATION_MESSAGE_LIMIT].decode(
                errors="replace"
            )
        except OSError:
            message = ""
    if not message and exit_code != 0 and policy == "FallbackToLogsOnError":
        try:
            lines = log_path.read_bytes().splitlines()
        except OSError:
            return ""
        # The kubelet reads the log of the instance that ended: what followed its start, without
        # the runner's own lines (a process killed before it wrote anything leaves nothing).
        header = RUNNER_HEADER.encode()
        starts = [i for i, line in enumerate(lines) if line.startswith(header)]
        starts = [i for i in starts if b" node-runner: start " in lines[i]]
        since = lines[starts[-1] + 1 :] if starts else lines
        own = [line for line in since if not line.startswith(header)][-FALLBACK_LOG_LINES:]
        message = b"\n".join(own)[-FALLBACK_LOG_BYTES:].decode(errors="replace").strip("\n")
    return message


def cleanup(state_dir: Path, uid: str) -> None:
    """Remove the pod's own volumes (claims stay)."""
    shutil.rmtree(pod_dir(state_dir, uid), ignore_errors=True)
