"""What the conftests of the cluster tiers share (tests/conftest.py for every tier, and
tests/api/conftest.py, whose fixtures end with the tier): the cluster a tier's tests use and
the namespaces they make.

`--kubeconfig PATH` (tests/conftest.py) points every tier at a cluster of its own instead of the
lab's; tests marked `lab` (they need the lab itself: its node runner, kwok nodes, processes or
files) are skipped there, saying why."""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from localcluster.othercluster import OtherCluster
from localcluster.supervisor import Cluster
from localcluster.waiting import wait_until

NAMESPACE_GONE_TIMEOUT = 180.0
KUBECONFIG_OPTION = "--kubeconfig"


def other_kubeconfig(config: pytest.Config) -> Path | None:
    path = config.getoption(KUBECONFIG_OPTION)
    return Path(path).resolve() if path else None


@contextlib.contextmanager
def tier_cluster(config: pytest.Config, lab: Callable[[], Cluster]) -> Iterator[Cluster]:
    """--kubeconfig's cluster, or the lab's `lab()`: reused if it runs healthy, else started
    and stopped at the end (unless LLMFLEET_KEEP_CLUSTER=1)."""
    kubeconfig = other_kubeconfig(config)
    if kubeconfig is not None:
        other = OtherCluster(kubeconfig_file=kubeconfig)
        try:
            other.ensure_up()
            yield other
        finally:
            other.down()
        return
    c = lab()
    started = c.ensure_up()
    yield c
    if started and not os.environ.get("LLMFLEET_KEEP_CLUSTER"):
        c.down()


@contextlib.contextmanager
def namespaces_made(api: client.ApiClient) -> Iterator[list[str]]:
    """Every namespace a test made. At the end each must be gone: one stuck in Terminating is a
    bug (ours, or in how a test cleaned up) that a user would hit too."""
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


@contextlib.contextmanager
def fresh_namespace(
    api: client.ApiClient, test: str, made: list[str], finish: Callable[[str], None]
) -> Iterator[str]:
    """A fresh namespace named after the test, deleted after it (`finish` then does what the
    cluster's namespace controller would, if it has none)."""
    slug = re.sub(r"[^a-z0-9]+", "-", test.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:5]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    made.append(name)
    yield name
    try:
        core.delete_namespace(name, propagation_policy="Background")
    except client.ApiException as e:
        if e.status != 404:  # a test may delete its namespace itself
            raise
    finish(name)
