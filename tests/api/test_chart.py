"""The Helm chart against the real API server: accepted, installed, upgraded and uninstalled.

The operator pods do not run real code here (kwok nodes); these tests are about the objects.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from localcluster.supervisor import Cluster, bindir

pytestmark = pytest.mark.cluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "llmfleet"
LLMDEPLOYMENT_CRD = "llmdeployments.llmfleet.dev"
# A release beside the session's, which creates the cluster's PriorityClasses.
BESIDE = ("--set", "priorityClasses.create=false")


def helm(cluster: Cluster, *args: str) -> str:
    result = subprocess.run(
        [str(bindir("helm") / "helm"), f"--kubeconfig={cluster.kubeconfig}", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, f"helm {' '.join(args)}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def release_name() -> str:
    # Cluster-scoped RBAC objects are named after the release: unique per test.
    return f"lf-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def new_release(cluster: Cluster, namespace: str) -> Iterator[Callable[[], str]]:
    """Unique release names; whatever a failed test left installed is uninstalled afterwards."""
    names: list[str] = []

    def new() -> str:
        names.append(release_name())
        return names[-1]

    yield new
    for name in names:
        subprocess.run(
            [
                str(bindir("helm") / "helm"),
                f"--kubeconfig={cluster.kubeconfig}",
                "uninstall",
                name,
                "--namespace",
                namespace,
                "--ignore-not-found",
                "--wait",
            ],
            capture_output=True,
            check=False,
            timeout=300,
        )


def set_args(values: dict[str, str]) -> list[str]:
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


def operator_args(api: client.ApiClient, namespace: str, release: str) -> list[str]:
    deployment = client.AppsV1Api(api).read_namespaced_deployment(f"{release}-llmfleet", namespace)
    (container,) = [c for c in deployment.spec.template.spec.containers if c.name == "operator"]
    return list(container.args)


def release_objects(api: client.ApiClient, namespace: str, release: str) -> dict[str, list[str]]:
    """The chart's objects of one release, found by its labels."""
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/part-of=llmfleet"
    core, apps, rbac = (
        client.CoreV1Api(api),
        client.AppsV1Api(api),
        client.RbacAuthorizationV1Api(api),
    )
    found = {
        "Deployment": apps.list_namespaced_deployment(namespace, label_selector=selector),
        "ServiceAccount": core.list_namespaced_service_account(namespace, label_selector=selector),
        "ConfigMap": core.list_namespaced_config_map(namespace, label_selector=selector),
        "Service": core.list_namespaced_service(namespace, label_selector=selector),
        "Role": rbac.list_role_for_all_namespaces(label_selector=selector),
        "RoleBinding": rbac.list_role_binding_for_all_namespaces(label_selector=selector),
        "ClusterRole": rbac.list_cluster_role(label_selector=selector),
        "ClusterRoleBinding": rbac.list_cluster_role_binding(label_selector=selector),
    }
    return {kind: [o.metadata.name for o in items.items] for kind, items in found.items()}


def crd_labels(api: client.ApiClient, name: str) -> dict[str, str]:
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(name)
    return dict(crd.metadata.labels or {})


def crd_exists(api: client.ApiClient, name: str) -> bool:
    try:
        client.ApiextensionsV1Api(api).read_custom_resource_definition(name)
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


SCENARIOS = {
    "defaults": {},
    "three-replicas": {"replicas": "3"},
    "monitoring-off-dashboards-elsewhere": {
        "monitoring.serviceMonitor.enabled": "false",
        "dashboards.namespace": "default",
        "prometheusAdapter.rules.enabled": "false",
    },
}


@pytest.mark.parametrize("values", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_rendered_chart_is_accepted_by_the_api_server(
    cluster: Cluster, namespace: str, values: dict[str, str]
) -> None:
    rendered = helm(
        cluster,
        "template",
        release_name(),
        str(CHART),
        "--namespace",
        namespace,
        "--include-crds",
        *set_args(values),
    )
    out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered) if doc}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ConfigMap", "Service"} <= kinds
    assert "(server dry run)" in out


def test_rendered_chart_watching_one_namespace_is_accepted(
    cluster: Cluster, namespace: str
) -> None:
    rendered = helm(
        cluster,
        "template",
        release_name(),
        str(CHART),
        "--namespace",
        namespace,
        "--set",
        f"watchNamespaces={{{namespace}}}",
    )
    out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    assert "role.rbac.authorization.k8s.io/" in out
    assert "(server dry run)" in out


def test_install_upgrade_uninstall(
    cluster: Cluster, api: client.ApiClient, namespace: str, new_release: Callable[[], str]
) -> None:
    release = new_release()
    # The session's other releases may hold the CRDs: this one takes them over, as an upgrade
    # from 0.1.0 does (charts/llmfleet/README.md, Upgrading). The PriorityClasses stay the
    # session release's: one release per cluster creates them.
    install = ("install", release, str(CHART), "--namespace", namespace)
    notes = helm(cluster, *install, "--take-ownership", *BESIDE)
    assert "kubectl get llmd" in notes
    assert crd_labels(api, LLMDEPLOYMENT_CRD)["app.kubernetes.io/instance"] == release
    objects = release_objects(api, namespace, release)
    assert objects["Deployment"] == [f"{release}-llmfleet"]
    cluster_wide = [f"{release}-llmfleet", f"{release}-llmfleet-priority-classes"]
    assert objects["ClusterRole"] == objects["ClusterRoleBinding"] == cluster_wide
    assert objects["Service"] == [f"{release}-llmfleet-metrics"]
    assert "--log-level=INFO" in operator_args(api, namespace, release)

    helm(
        cluster,
        "upgrade",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--reuse-values",
        "--set",
        "logLevel=DEBUG",
    )
    args = operator_args(api, namespace, release)
    assert "--log-level=DEBUG" in args
    assert "--log-level=INFO" not in args

    helm(cluster, "uninstall", release, "--namespace", namespace, "--wait")
    assert release_objects(api, namespace, release) == {kind: [] for kind in objects}, (
        "objects left behind by helm uninstall"
    )
    assert crd_exists(api, LLMDEPLOYMENT_CRD), "helm uninstall must keep the CRD (crds.keep)"


def test_install_watching_listed_namespaces_grants_roles_there_only(
    cluster: Cluster, api: client.ApiClient, namespace: str, new_release: Callable[[], str]
) -> None:
    release = new_release()
    helm(
        cluster,
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--set",
        f"watchNamespaces={{{namespace}}}",
        # Another release of the cluster owns the CRDs and the PriorityClasses.
        "--set",
        "crds.enabled=false",
        *BESIDE,
    )
    objects = release_objects(api, namespace, release)
    # Cluster-wide only: get the spare PriorityClass (cluster-scoped) by name.
    cluster_wide = [f"{release}-llmfleet-priority-classes"]
    assert objects["ClusterRole"] == objects["ClusterRoleBinding"] == cluster_wide
    # The operator's rules in the watched namespace, and the leader Lease's and the fetcher
    # key's where it runs (here the same namespace).
    assert (
        objects["Role"]
        == objects["RoleBinding"]
        == [
            f"{release}-llmfleet",
            f"{release}-llmfleet-fetcher-key",
            f"{release}-llmfleet-leader-election",
        ]
    )
    assert f"--namespace={namespace}" in operator_args(api, namespace, release)
    # The operator's account may manage engine Deployments in the watched namespace only.
    review = client.AuthorizationV1Api(api).create_subject_access_review(
        client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=f"system:serviceaccount:{namespace}:{release}-llmfleet",
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace, verb="create", group="apps", resource="deployments"
                ),
            )
        )
    )
    assert review.status.allowed
    helm(cluster, "uninstall", release, "--namespace", namespace, "--wait")
    assert all(not names for names in release_objects(api, namespace, release).values())
