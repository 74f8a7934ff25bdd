"""The operator runs with the chart's ServiceAccount (see harness.Operator): every LLMDeployment
e2e test proves its RBAC is enough; these prove it is not more than the operator needs."""

from __future__ import annotations

import pytest
from kubernetes import client, config
from localcluster.operator_process import OPERATOR_NAMESPACE, Operator

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize(
    ("verb", "call"),
    [
        pytest.param(
            "list secrets",
            lambda api, ns: client.CoreV1Api(api).list_namespaced_secret(ns),
            id="cannot-read-secrets",
        ),
        pytest.param(
            "read a Secret where it serves (it creates the fetchers' token Secrets, never reads)",
            lambda api, ns: client.CoreV1Api(api).read_namespaced_secret("lora-fetcher", ns),
            id="cannot-read-a-secret-by-name",
        ),
        pytest.param(
            "read a Secret of its own namespace but its fetcher key",
            lambda api, ns: client.CoreV1Api(api).read_namespaced_secret(
                "other", OPERATOR_NAMESPACE
            ),
            id="cannot-read-its-namespaces-other-secrets",
        ),
        pytest.param(
            "delete a namespace",
            lambda api, ns: client.CoreV1Api(api).delete_namespace(ns),
            id="cannot-delete-namespaces",
        ),
        pytest.param(
            "create a ClusterRoleBinding",
            lambda api, ns: client.RbacAuthorizationV1Api(api).create_cluster_role_binding(
                client.V1ClusterRoleBinding(
                    metadata=client.V1ObjectMeta(name="escalate"),
                    role_ref=client.V1RoleRef(
                        api_group="rbac.authorization.k8s.io",
                        kind="ClusterRole",
                        name="cluster-admin",
                    ),
                    subjects=[client.RbacV1Subject(kind="User", name="me")],
                )
            ),
            id="cannot-escalate",
        ),
        pytest.param(
            "list nodes", lambda api, ns: client.CoreV1Api(api).list_node(), id="cannot-list-nodes"
        ),
        pytest.param(
            "create pods",
            lambda api, ns: client.CoreV1Api(api).create_namespaced_pod(
                ns,
                client.V1Pod(
                    metadata=client.V1ObjectMeta(name="x"),
                    spec=client.V1PodSpec(containers=[client.V1Container(name="x", image="x")]),
                ),
            ),
            id="cannot-create-pods-directly",
        ),
    ],
)
def test_operator_identity_is_denied_outside_its_grant(
    operator: Operator, namespace: str, verb: str, call: object
) -> None:
    api = config.new_client_from_config(config_file=str(operator.kubeconfig))
    with pytest.raises(client.ApiException) as err:
        call(api, namespace)  # type: ignore[operator]
    assert err.value.status == 403, f"the operator may {verb}"
