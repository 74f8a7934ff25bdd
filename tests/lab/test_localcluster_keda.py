"""The local cluster's KEDA install (dev/localcluster/keda.py): what it binds, and where it
listens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from localcluster import keda

OPERATOR_ROLES = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: keda-operator}
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: keda-operator, namespace: keda}
rules: []
"""
EXTERNAL_READER = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: keda-external-metrics-reader}
rules: []
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A config directory shaped as build-tools.sh leaves it, with upstream's role names."""
    (tmp_path / "rbac").mkdir()
    (tmp_path / "rbac" / "operator-role.yaml").write_text(OPERATOR_ROLES)
    (tmp_path / "rbac" / "metrics-server-role.yaml").write_text(EXTERNAL_READER)
    return tmp_path


def _bindings(docs: list[dict[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """(binding kind, role name) -> the subjects' names."""
    return {
        (d["kind"], d["roleRef"]["name"]): [s["name"] for s in d["subjects"]]
        for d in docs
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
    }


KEDA_USERS = [keda.OPERATOR_USER, keda.ADAPTER_USER]


@pytest.mark.parametrize(
    ("kind", "role", "subjects"),
    [
        # What upstream binds to the ServiceAccount both its Deployments run as: the operator's
        # ClusterRole and its Role in `keda`, and what an extension API server needs.
        ("ClusterRoleBinding", "keda-operator", KEDA_USERS),
        ("RoleBinding", "keda-operator", KEDA_USERS),
        ("ClusterRoleBinding", "system:auth-delegator", KEDA_USERS),
        ("RoleBinding", "extension-apiserver-authentication-reader", KEDA_USERS),
        # The HPA controller reads the external metrics.
        ("ClusterRoleBinding", "keda-external-metrics-reader", ["horizontal-pod-autoscaler"]),
    ],
)
def test_rbac_binds_upstreams_roles(
    config: Path, kind: str, role: str, subjects: list[str]
) -> None:
    assert _bindings(keda.rbac(config))[(kind, role)] == subjects


def test_rbac_starts_with_the_namespace(config: Path) -> None:
    assert keda.rbac(config)[0] == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "keda", "labels": keda.LABEL},
    }


LISTENERS = {
    "operator": (
        keda.operator_command(
            Path("/k"),
            Path("/kc"),
            Path("/c"),
            Path("/ca"),
            metrics="127.0.0.1:1",
            health="127.0.0.1:2",
            grpc="127.0.0.1:3",
        ),
        ("--metrics-bind-address", "--health-probe-bind-address", "--metrics-service-bind-address"),
    ),
    "adapter": (
        keda.adapter_command(
            Path("/a"), Path("/kc"), Path("/c"), Path("/ca.crt"), 4, 5, grpc="127.0.0.1:3"
        ),
        ("--bind-address", "--metrics-service-address"),
    ),
}


@pytest.mark.parametrize("component", sorted(LISTENERS))
def test_every_address_is_loopback(component: str) -> None:
    cmd, flags = LISTENERS[component]
    args = dict(a.split("=", 1) for a in cmd[1:])
    for flag in flags:
        assert args[flag].startswith("127.0.0.1"), (flag, args[flag])


def test_certificate_rotation_is_off() -> None:
    cmd, _ = LISTENERS["operator"]
    assert "--enable-cert-rotation=false" in cmd


@pytest.mark.parametrize(
    ("query", "expected"),
    [("vector(1)", "vector(1)"), ('sum(x{a="b"})', 'sum(x{a="b"})')],
)
def test_scaled_object_carries_the_query(query: str, expected: str) -> None:
    so = keda.scaled_object("s", "ns", "d", "http://127.0.0.1:9090", query)
    (trigger,) = so["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["query"] == expected
    assert so["spec"]["minReplicaCount"] == 0
    assert so["spec"]["scaleTargetRef"] == {"name": "d"}
