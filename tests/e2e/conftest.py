"""The operator, started once per session against the local cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from localcluster.supervisor import Cluster

from .harness import Operator


@pytest.fixture(scope="session")
def operator(cluster: Cluster) -> Iterator[Operator]:
    op = Operator(cluster)
    op.install_identity()
    op.start()
    yield op
    op.kill()
