"""The supervisor's own calls to the local API server, as the admin: kubectl, GETs of the API,
installing and deleting what the cluster installs, and waiting for the API to agree (a CRD
Established, discovery listing a group, the default ServiceAccount)."""

from __future__ import annotations

import json
import ssl
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import discovery, httpwait, kubeconfigs
from .tools import bindir

FIELD_MANAGER = "llmfleet-localcluster"


@dataclass(frozen=True)
class Api:
    server: str  # https://127.0.0.1:<port>
    pki_dir: Path
    kubeconfig: Path  # the admin's

    def kubectl_path(self) -> Path:
        return bindir("kubernetes") / "kubectl"

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return subprocess.run(
            [str(self.kubectl_path()), f"--kubeconfig={self.kubeconfig}", *args],
            check=True,
            capture_output=True,
            text=True,
            input=input,
        ).stdout

    def context(self) -> ssl.SSLContext:
        return kubeconfigs.admin_context(self.pki_dir)

    def get(self, path: str, accept: str | None = None) -> bytes:
        """GET `path` (/apis/...) of the API server."""
        return httpwait.get(f"{self.server}{path}", self.context(), accept)

    def ready(self) -> bool:
        return httpwait.answers(f"{self.server}/readyz", self.context())

    def apply_installed(self, files: Iterable[Path], docs: list[dict[str, Any]]) -> None:
        """Server-side apply, in one kubectl, of what the cluster installs for a component:
        upstream's manifest `files` as they ship (CRDs of a megabyte and more, which kubectl
        reads faster than PyYAML would) and our `docs` from stdin."""
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            f"--field-manager={FIELD_MANAGER}",
            *(a for f in files for a in ("-f", str(f))),
            "-f",
            "-",
            input=dump(docs),
        )

    def delete(self, *names: str, docs: list[dict[str, Any]] | None = None) -> None:
        """Delete `names` (kind/name) or `docs`, if they exist, and return once they are gone
        from etcd (their finalizers done)."""
        where = ("-f", "-") if docs is not None else ()
        self.kubectl(
            "delete",
            "--ignore-not-found",
            "--wait=true",
            "--timeout=120s",
            *names,
            *where,
            input=dump(docs) if docs is not None else None,
        )

    def condition(self, path: str, kind: str) -> bool:
        """Whether the object at `path` has the status condition `kind` True (False if the
        object or the API server does not answer)."""
        try:
            return has_condition(json.loads(self.get(path)), kind)
        except OSError:  # urllib.error.URLError and HTTPError among them
            return False

    def established(self, crd: str) -> bool:
        return self.condition(crd_path(crd), "Established")

    def wait_established(self, crds: Iterable[str], timeout: float = 60) -> None:
        """Wait until every CRD in `crds` is Established. (Not `kubectl wait`: it fails on a
        CRD that has no conditions yet.)"""
        deadline = time.monotonic() + timeout
        for crd in crds:
            while not has_condition(json.loads(self.get(crd_path(crd))), "Established"):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {crd} not Established after {timeout:.0f} s")
                time.sleep(0.05)

    def wait_discovery(self, groups: Iterable[str], served: bool, timeout: float = 60) -> None:
        """Until discovery lists every group in `groups` (served), or none of them."""
        discovery.wait(self.get, groups, served, timeout)

    def wait_default_serviceaccount(self, timeout: float = 60) -> None:
        # Pods can't be created in a namespace until its default ServiceAccount exists.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.kubectl("get", "serviceaccount", "default", "-n", "default")
                return
            except subprocess.CalledProcessError:
                time.sleep(0.3)
        raise TimeoutError("default ServiceAccount never appeared; see kube-controller-manager.log")


def crd_path(name: str) -> str:
    return f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"


def apiservice_path(name: str) -> str:
    return f"/apis/apiregistration.k8s.io/v1/apiservices/{name}"


def dump(docs: Iterable[dict[str, Any]]) -> str:
    """`docs` as one multi-document YAML stream, for kubectl's stdin."""
    return "\n---\n".join(yaml.safe_dump(d) for d in docs)


def has_condition(obj: dict[str, Any], kind: str) -> bool:
    """Whether `obj` has the status condition `kind` True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def json_stream(text: str) -> Iterator[dict[str, Any]]:
    """The objects of kubectl's `-o json` output for several objects: one JSON document each."""
    decoder, pos = json.JSONDecoder(), 0
    while pos < len(text.rstrip()):
        obj, end = decoder.raw_decode(text, pos)
        yield obj
        pos = end
        while pos < len(text) and text[pos].isspace():
            pos += 1
