"""Fixtures shared by every test that needs a cluster.

`cluster` reuses a healthy running lab cluster (e.g. from `make cluster-up`) or starts one and
stops it at the end of the session; `--kubeconfig PATH` uses that cluster instead, and skips the
tests marked `lab` (they need the lab itself), saying why. The API tier (tests/api) has its own
`cluster`: the API server alone. Each test gets a fresh namespace of its own. `metrics_stack`
(dev/localcluster/metricsstack) runs Prometheus, prometheus-adapter and kube-state-metrics
against the lab and hands out the Prometheus URL: a stack already running on the cluster is
reused and left running; one the fixture started is stopped at the end of the session
(`Cluster.down()` stops it either way). LLMFLEET_KEEP_CLUSTER=1 keeps what the session started
running.
"""

from __future__ import annotations

# First: under pytest-xdist, gives this worker a lab of its own before localcluster is imported.
import workers

# isort: split

import os
from collections.abc import Callable, Iterator

import pytest
from clusters import (
    KUBECONFIG_OPTION,
    fresh_namespace,
    namespaces_made,
    other_kubeconfig,
    tier_cluster,
)
from hubstub import HubStub, hub_stub
from kubernetes import client, config
from localcluster.metricsstack import MetricsStack
from localcluster.supervisor import Cluster

pytest_plugins = ["worker_times"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        KUBECONFIG_OPTION,
        metavar="PATH",
        default=None,
        help="run the cluster tests against the cluster of this kubeconfig instead of the "
        "lab's (it is not started or stopped); tests marked `lab` skip there",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if workers.WORKER is not None:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        order = {
            path: i
            for i, path in enumerate(workers.ordered(_modules(items), _spacers(items), count))
        }
        items.sort(key=lambda item: order[_module(item)])
    kubeconfig = other_kubeconfig(config)
    if kubeconfig is None:
        return
    for item in items:
        lab = item.get_closest_marker("lab")
        if lab is not None:
            why = lab.args[0] if lab.args else "the lab itself"
            item.add_marker(
                pytest.mark.skip(reason=f"{kubeconfig} is not the lab; this test needs {why}")
            )


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _modules(items: list[pytest.Item]) -> list[str]:
    return list(dict.fromkeys(_module(item) for item in items))


def _spacers(items: list[pytest.Item]) -> set[str]:
    """Modules that are one xdist scope (no test classes) of at least SPACER_TESTS tests."""
    tests: dict[str, int] = {}
    scopes: dict[str, set[str]] = {}
    for item in items:
        module = _module(item)
        tests[module] = tests.get(module, 0) + 1
        scopes.setdefault(module, set()).add(item.nodeid.rsplit("::", 1)[0])
    return {m for m, n in tests.items() if n >= workers.SPACER_TESTS and len(scopes[m]) == 1}


@pytest.fixture(scope="session")
def cluster(pytestconfig: pytest.Config) -> Iterator[Cluster]:
    with tier_cluster(pytestconfig, Cluster) as c:
        yield c


@pytest.fixture(scope="session")
def api(cluster: Cluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture(scope="session")
def test_namespaces(api: client.ApiClient) -> Iterator[list[str]]:
    with namespaces_made(api) as made:
        yield made


@pytest.fixture(scope="session")
def finish_namespace() -> Callable[[str], None]:
    """What a test's namespace needs after its deletion: nothing where a namespace controller
    runs (the lab's controller manager). The API tier overrides it."""
    return lambda _name: None


@pytest.fixture
def namespace(
    api: client.ApiClient,
    request: pytest.FixtureRequest,
    test_namespaces: list[str],
    finish_namespace: Callable[[str], None],
) -> Iterator[str]:
    with fresh_namespace(api, request.node.name, test_namespaces, finish_namespace) as name:
        yield name


@pytest.fixture(scope="session")
def lab_hub() -> Iterator[HubStub]:
    """A stand-in for the Hugging Face Hub on 127.0.0.1 that the tiers' operator reads config.json
    from (the chart's huggingFace.endpoint): a model neither the catalog nor its spec describes
    makes the operator ask the Hub, and tests never dial outside loopback. It has no model
    unless a test serves one: the Hub's 404."""
    with hub_stub() as stub:
        yield stub


@pytest.fixture(scope="session")
def metrics_stack(cluster: Cluster) -> Iterator[MetricsStack]:
    stack = MetricsStack(cluster)
    was_running = stack.running()
    stack.start()
    yield stack
    if not was_running and not os.environ.get("LLMFLEET_KEEP_CLUSTER"):
        stack.stop()
