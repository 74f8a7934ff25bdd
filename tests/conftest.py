"""Fixtures shared by every test that needs the local cluster.

`cluster` reuses a healthy running cluster (e.g. from `make cluster-up`) or starts one and stops it
at the end of the session; each test gets a fresh namespace of its own. `metrics_stack`
(dev/localcluster/metricsstack) runs Prometheus, prometheus-adapter and kube-state-metrics
against it and hands out the Prometheus URL: a stack already running on the cluster is reused and
left running; one the fixture started is stopped at the end of the session (`Cluster.down()`
stops it either way). LLMFLEET_KEEP_CLUSTER=1 keeps what the session started running.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, config
from localcluster.metricsstack import MetricsStack
from localcluster.supervisor import Cluster
from localcluster.waiting import wait_until

NAMESPACE_GONE_TIMEOUT = 180.0


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    started = c.ensure_up()
    yield c
    if started and not os.environ.get("LLMFLEET_KEEP_CLUSTER"):
        c.down()


@pytest.fixture(scope="session")
def api(cluster: Cluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture(scope="session")
def test_namespaces(api: client.ApiClient) -> Iterator[list[str]]:
    """Every namespace a test made. At the end of the session each must be gone: one stuck in
    Terminating is a bug (ours, or in how a test cleaned up) that a user would hit too."""
    made: list[str] = []
    yield made
    core = client.CoreV1Api(api)

    def left() -> list[str]:
        live = {n.metadata.name for n in core.list_namespace().items}
        return [n for n in made if n in live]

    try:
        wait_until(lambda: not left(), timeout=NAMESPACE_GONE_TIMEOUT, interval=2)
    except AssertionError:
        raise AssertionError(f"namespaces left behind: {left()}") from None


@pytest.fixture
def namespace(
    api: client.ApiClient, request: pytest.FixtureRequest, test_namespaces: list[str]
) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:5]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    test_namespaces.append(name)
    yield name
    try:
        core.delete_namespace(name, propagation_policy="Background")
    except client.ApiException as e:
        if e.status != 404:  # a test may delete its namespace itself
            raise


@pytest.fixture(scope="session")
def metrics_stack(cluster: Cluster) -> Iterator[MetricsStack]:
    stack = MetricsStack(cluster)
    was_running = stack.running()
    stack.start()
    yield stack
    if not was_running and not os.environ.get("LLMFLEET_KEEP_CLUSTER"):
        stack.stop()
