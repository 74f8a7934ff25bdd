"""The session fixture `metrics_stack` (registered in tests/conftest.py).

    def test_x(metrics_stack: MetricsStack, operator: Operator) -> None:
        metrics_stack.scrape("llmfleet-operator", f"127.0.0.1:{operator.metrics_port}")
        metrics_stack.query("kube_pod_labels")

A stack already running on the cluster is reused and left running; one the fixture started is
stopped at the end of the session (unless LLMFLEET_KEEP_CLUSTER is set; `Cluster.down()` stops it
either way).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from ..supervisor import Cluster
from .stack import MetricsStack


@pytest.fixture(scope="session")
def metrics_stack(cluster: Cluster) -> Iterator[MetricsStack]:
    stack = MetricsStack(cluster)
    was_running = stack.running()
    stack.start()
    yield stack
    if not was_running and not os.environ.get("LLMFLEET_KEEP_CLUSTER"):
        stack.stop()
