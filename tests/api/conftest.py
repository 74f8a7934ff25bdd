"""The API tier: the API server alone (dev/localcluster/apionly.py: etcd and kube-apiserver as
the lab starts them, ready in seconds) with the chart installed as users install it (all but the
operator pod) and the operator running inside this process (dev/localcluster/operator_thread.py)
as the chart's ServiceAccount. No scheduler, controller manager or node: what is tested here is
admission and validation, RBAC, and what the operator writes (objects, status, Events).

The fixtures end with the tier (package scope), so that `make test` does not keep the API
server and the operator running through the e2e tier. `--kubeconfig PATH` uses that cluster
instead of starting the API server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from clusters import namespaces_made, tier_cluster
from hubstub import HubStub
from kubernetes import client, config
from localcluster.apionly import (
    ApiServerCluster,
    controller_manager_runs,
    finish_namespace_deletion,
)
from localcluster.operator_thread import ThreadOperator
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP, API_VERSION
from llmfleet.models.batchjob import PLURAL as BATCH_PLURAL
from llmfleet.models.deployment import PLURAL

# The kinds the operator of this process reconciles: a namespace's go with it.
OPERATOR_KINDS = ((API_GROUP, API_VERSION, PLURAL), (API_GROUP, API_VERSION, BATCH_PLURAL))


@pytest.fixture(scope="package")
def cluster(pytestconfig: pytest.Config) -> Iterator[Cluster]:
    with tier_cluster(pytestconfig, ApiServerCluster) as c:
        yield c


@pytest.fixture(scope="package")
def api(cluster: Cluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture(scope="package")
def test_namespaces(api: client.ApiClient) -> Iterator[list[str]]:
    with namespaces_made(api) as made:
        yield made


@pytest.fixture(scope="package")
def controller_manager(api: client.ApiClient) -> bool:
    return controller_manager_runs(api)


@pytest.fixture(scope="package")
def finish_namespace(api: client.ApiClient, controller_manager: bool) -> Callable[[str], None]:
    """Without a controller manager, what its namespace controller would do."""
    if controller_manager:
        return lambda _name: None
    return lambda name: finish_namespace_deletion(api, name, OPERATOR_KINDS)


@pytest.fixture(scope="package", autouse=True)
def chart(cluster: Cluster, controller_manager: bool, lab_hub: HubStub) -> ThreadOperator:
    """The chart, installed with Helm (CRDs, RBAC, the operator's ServiceAccount and its
    token), for every test of the tier, reading config.json from the session's Hub stand-in;
    the operator not started."""
    op = ThreadOperator(
        cluster,
        helm_wait=controller_manager,
        chart_values=(f"huggingFace.endpoint={lab_hub.url}",),
    )
    op.install_identity()
    return op


@pytest.fixture(scope="package")
def operator(chart: ThreadOperator) -> Iterator[ThreadOperator]:
    chart.start()
    yield chart
    chart.stop()
