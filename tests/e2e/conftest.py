"""The operator, started once per session against the local cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hubstub import HubStub
from kubernetes import client
from localcluster.claims import remove_claims
from localcluster.nodes import Pool
from localcluster.supervisor import Cluster

from . import localnode
from .harness import E2E_GPU_PRODUCT, Operator, e2e_operator


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The vLLM CPU virtualenv's python (installed on first use: minutes, once per machine)."""
    return localnode.vllm_python()


@pytest.fixture(scope="session")
def e2e_gpu_pool(cluster: Cluster) -> str:
    """GPU nodes of the tests' own, so whatever else runs on the cluster (`make demo`) cannot
    take the GPUs the tests count on."""
    cluster.apply_nodes(
        [
            Pool(
                name="e2e-h100",
                count=2,
                gpus=8,
                product=E2E_GPU_PRODUCT,
                gpu_memory_mib=81559,
                cpu="96",
                memory="1536Gi",
            )
        ]
    )
    cluster.wait_nodes_ready()
    return E2E_GPU_PRODUCT


@pytest.fixture(scope="session")
def operator(cluster: Cluster, e2e_gpu_pool: str, lab_hub: HubStub) -> Iterator[Operator]:
    """The chart's operator pod, installed with Helm from the image `make images` built (built
    here if missing) onto `local-system-0`, Ready and leading, reading config.json from the
    session's Hub stand-in."""
    op = e2e_operator(cluster, lab_hub.url)
    op.install()
    op.start()
    yield op
    op.uninstall()


@pytest.fixture
def volumes(api: client.ApiClient, cluster: Cluster, namespace: str) -> Iterator[None]:
    """Removes, after the test, the claims it made with `batchdata.claim` and their files."""
    yield
    remove_claims(api, cluster, namespace)
