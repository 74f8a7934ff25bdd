"""A cluster beside the shared one, for a test that must not share it (its CRDs, its operator):
ports and pod networks of its own, no LWS, no KEDA, the node runner's GPU node."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .supervisor import CLUSTER_INDEX, Cluster, Ports


@contextlib.contextmanager
def own_cluster(
    prefix: str, port_shift: int, runner_octet: int, gpus: int = 2
) -> Iterator[Cluster]:
    """Up on entry, wiped on exit. `port_shift` moves every port (Ports.shifted); it must differ
    from every other user's by more than a cluster's span of ports (a shift that is not a
    multiple of 1000 never meets another index's ports). `runner_octet`: the node runner's pods
    get 127.<runner_octet + 10 x LLMFLEET_CLUSTER_INDEX>.0.0/16."""
    state = Path(tempfile.mkdtemp(prefix=prefix))
    c = Cluster(state_dir=state, ports=Ports.shifted(port_shift), lws=False, keda=False)
    try:
        c.up(log=lambda _: None)
        c.start_node_runner(
            gpus=gpus, pod_network=f"127.{runner_octet + 10 * CLUSTER_INDEX}.0.0/16"
        )
        yield c
    finally:
        c.wipe()
