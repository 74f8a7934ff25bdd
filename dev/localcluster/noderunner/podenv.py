"""A container's environment as the kubelet builds it: env values with $(VAR) expansion,
Secret and ConfigMap keys, the downward API; then the paths mapped to the emulated volumes."""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .adaptations import LAB_VOLUMES_ENV, adapt_env
from .volumes import PodVolumes

_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_MAP_REF = re.compile(r"^metadata\.(annotations|labels)\['([^']+)'\]$")
# namespace, name, key -> the value, None when the object or key is missing
ReadKey = Callable[[str, str, str], str | None]
ReadData = Callable[[str, str], Mapping[str, str] | None]  # namespace, name -> data, None: missing


class MissingKeyError(Exception):
    """A Secret or ConfigMap key the container needs is missing: the kubelet's
    CreateContainerConfigError, with its message."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in env values, command and args; $$ escapes."""
    parts = text.split("$$")
    return "$".join(_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), p) for p in parts)


def container_env(
    pod: Mapping[str, Any],
    spec: Mapping[str, Any],
    base: Mapping[str, str],
    *,
    ip: str,
    node: str,
    read_secret_key: ReadKey,
    read_configmap_key: ReadKey,
    read_secret: ReadData | None = None,
    read_configmap: ReadData | None = None,
) -> dict[str, str]:
    """`base` plus the container's `envFrom` and then its `env` (which wins), resolved as the
    kubelet resolves them."""
    meta = pod["metadata"]
    ns = str(meta["namespace"])
    env: dict[str, str] = dict(base)
    env["HOSTNAME"] = str(meta["name"])
    for source in spec.get("envFrom") or []:
        for field, read, kind in (
            ("secretRef", read_secret, "secret"),
            ("configMapRef", read_configmap, "configmap"),
        ):
            ref = source.get(field)
            if ref is None:
                continue
            data = read(ns, str(ref["name"])) if read is not None else None
            if data is None and not ref.get("optional"):
                raise MissingKeyError(f'{kind} "{ref["name"]}" not found')
            prefix = str(source.get("prefix") or "")
            env.update({f"{prefix}{k}": v for k, v in (data or {}).items() if "=" not in k})
    for e in spec.get("env") or []:
        name = e["name"]
        if "valueFrom" not in e:
            env[name] = expand(str(e.get("value", "")), env)
            continue
        src = e["valueFrom"]
        value: str | None
        if "secretKeyRef" in src:
            ref = src["secretKeyRef"]
            value = read_secret_key(ns, ref["name"], ref["key"])
            if value is None and not ref.get("optional"):
                raise MissingKeyError(f'secret "{ref["name"]}" not found')
        elif "configMapKeyRef" in src:
            ref = src["configMapKeyRef"]
            value = read_configmap_key(ns, ref["name"], ref["key"])
            if value is None and not ref.get("optional"):
                raise MissingKeyError(f'configmap "{ref["name"]}" not found')
        elif "fieldRef" in src and (found := _metadata_map_ref(pod, src)) is not None:
            value = found  # e.g. a Job's metadata.annotations['...job-completion-index']
        elif "fieldRef" in src:
            value = {
                "metadata.name": str(meta["name"]),
                "metadata.namespace": ns,
                "metadata.uid": str(meta["uid"]),
                "status.podIP": ip,
                "status.hostIP": "127.0.0.1",
                "spec.nodeName": node,
                "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
            }.get(src["fieldRef"]["fieldPath"], "")
        else:
            value = ""  # resourceFieldRef: no resources to report
        if value is not None:
            env[name] = value
    return env


def _metadata_map_ref(pod: Mapping[str, Any], source: Mapping[str, Any]) -> str | None:
    """A fieldRef to metadata.annotations['k'] or metadata.labels['k'] (as Indexed Jobs use for
    JOB_COMPLETION_INDEX); None for other paths."""
    match = _MAP_REF.match(str(source["fieldRef"].get("fieldPath", "")))
    if match is None:
        return None
    values = pod["metadata"].get(match.group(1)) or {}
    return str(values.get(match.group(2), ""))


def decode_secret(data: Mapping[str, str] | None, key: str) -> str | None:
    if not data or key not in data:
        return None
    return base64.b64decode(data[key]).decode()


def process_env(env: dict[str, str], mounts: PodVolumes, real_gpus: bool = False) -> dict[str, str]:
    """A container's environment as its process gets it. The pod's own paths map to the emulated
    volumes first; what the runner adds after that is a host path (a checkout under /tmp must
    not be mistaken for the pod's `/tmp` emptyDir). The mounts themselves go along as
    LAB_VOLUMES_ENV, for paths a process is told at run time (site/sitecustomize.py)."""
    out = adapt_env({k: mounts.rewrite(v) for k, v in env.items()}, real_gpus)
    if mounts.paths:
        out[LAB_VOLUMES_ENV] = json.dumps(mounts.paths, sort_keys=True)
    return out


def base_env(python: Path) -> dict[str, str]:
    """What every container process starts from (a container image's usual environment)."""
    return {
        "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
