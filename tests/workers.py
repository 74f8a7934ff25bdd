"""`make test` runs the tiers on pytest-xdist workers (three by default), each against a lab of its
own, so one worker's engines start while another's tests wait on an HPA window or a grace period.

Imported by tests/conftest.py before anything imports `localcluster` (its ports are read from
the environment when it is imported): worker N gets LLMFLEET_CLUSTER_INDEX base+1+N and the state
directory `.cluster-gwN`, so the workers' clusters, node runners, pod networks and API tiers never
meet, and none of them meets the lab of `make cluster-up` or `make demo` (base index, `.cluster`):
`make test` neither sees what the demo left nor leaves anything the demo would list, whichever
runs first, and the two can run at once. Plain pytest, without xdist, reuses the `.cluster` lab
(the loop of tests/README.md, "Running one test").

`ordered` hands the workers the slowest modules first (xdist's loadfile, in collection order):
the workers end within the shortest modules' time of each other. A stale list unbalances the
workers; it changes nothing else."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ... under xdist; else unset


def _own_lab(worker: str) -> None:
    number = int(re.sub(r"\D", "", worker) or "0")
    base = int(os.environ.get("LLMFLEET_CLUSTER_INDEX", "0"))
    state = Path(os.environ.get("LLMFLEET_CLUSTER_DIR", REPO / ".cluster"))
    os.environ["LLMFLEET_CLUSTER_INDEX"] = str(base + 1 + number)
    os.environ["LLMFLEET_CLUSTER_DIR"] = f"{state}-{worker}"


if WORKER is not None:
    _own_lab(WORKER)

# The e2e modules by their time in CI on three workers (`--durations`, 2026-11-26), longest first;
# the rest follow in collection order (the unit, lab and API tiers' many short modules even the
# workers out at the end).
SLOWEST_FIRST = (
    "test_scale_to_zero",
    "test_batchjob",
    # Not third, though it is the longer: three modules of real vLLM engines starting together
    # on 2 cores made the whole run 105 s longer (1,116 s against 1,011 s, 2026-11-26).
    "test_autoscaling",
    "test_spare_batch",
    "test_llmdeployment",
    "test_dataplane",
    "test_upgrade",
    "test_demo",
    "test_resilience",
    "test_observability_kv",
    "test_lora",
    "test_router",
    "test_plan_verified",
    "test_leader_election",
    "test_engine_standin_contract",
    "test_missing_references",
    "test_fuzz",
    "test_engine_failures",
    "test_pod_security",
    "test_multinode",
    "test_observability",
    "test_keda",
)


def ordered(paths: list[str]) -> list[str]:
    """`paths` (test module paths, e.g. tests/e2e/test_demo.py) reordered for the workers: the
    e2e tier's slowest modules first, then e2e, API, unit and lab modules in collection
    order."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}

    def key(path: str) -> tuple[int, int]:
        tier = path.split("/")[-2] if "/" in path else ""
        name = Path(path).stem
        if tier == "e2e":
            return (0, rank.get(name, len(rank)))
        return (1 if tier == "api" else 2, 0)

    return sorted(paths, key=key)  # stable: ties keep collection order
