"""`make test` runs the tiers on pytest-xdist workers (three by default), each against a lab of its
own, so one worker's engines start while another's tests wait on an HPA window or a grace period.

Imported by tests/conftest.py before anything imports `localcluster` (its ports are read from
the environment when it is imported): worker N gets LLMFLEET_CLUSTER_INDEX base+1+N and the state
directory `.cluster-gwN`, so the workers' clusters, node runners, pod networks and API tiers never
meet, and none of them meets the lab of `make cluster-up` or `make demo` (base index, `.cluster`):
`make test` neither sees what the demo left nor leaves anything the demo would list, whichever
runs first, and the two can run at once. Plain pytest, without xdist, reuses the `.cluster` lab
(the loop of tests/README.md, "Running one test").

`ordered` hands the workers the slowest modules first (xdist's loadfile, in collection order),
each followed by a short unit module (a spacer). Why the spacers: a worker runs a test only once
it holds the one after it (for the module fixtures' teardown), so xdist sends a worker its next
module as soon as it has two tests or fewer left: a one-test e2e module (most of them) brings
the next one in the queue along at once, and the worker runs both in a row, whatever the other
workers are doing. With a spacer of three or more tests in between, the next slow module is
handed out only when the spacer runs, that is when a worker is free: the slow modules go to
whichever worker frees first, as a greedy longest-first schedule does. A stale list unbalances
the workers; it changes nothing else."""

from __future__ import annotations

import os
import re
from collections.abc import Collection
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

# The e2e modules by their time in CI on three workers (setup and call, `--durations`,
# 2026-11-27), longest first; the rest follow in collection order. The end of make test's output
# ("time per worker", tests/worker_times.py) gives each module's time for the next update.
SLOWEST_FIRST = (
    "test_scale_to_zero",
    "test_spare_batch",
    # Not earlier, though it is longer than the next: three modules of real vLLM engines starting
    # together on 2 cores made the whole run 105 s longer (1,116 s against 1,011 s, 2026-11-26).
    "test_autoscaling",
    "test_upgrade",
    "test_batchjob",
    "test_compile_cache",
    "test_engine_standin_contract",
    "test_demo",
    "test_standby",
    "test_engine_failures",
    "test_observability_kv",
    "test_llmdeployment",
    "test_dataplane",
    "test_resilience",
    "test_lora",
    "test_leader_election",
    "test_router",
    "test_plan_verified",
    "test_missing_references",
    "test_fuzz",
    "test_pod_security",
    "test_multinode",
    "test_observability",
    "test_keda",
)
# A spacer holds at least this many tests in one xdist scope (a module without test classes), so
# that a worker holding it asks for nothing more until it runs it.
SPACER_TESTS = 3


def ordered(paths: list[str], spacers: Collection[str] = (), workers: int = 1) -> list[str]:
    """`paths` (test module paths, e.g. tests/e2e/test_demo.py) reordered for the workers: the
    e2e tier's slowest modules first, then e2e, API, unit and lab modules in collection order;
    from the e2e module after the first `workers` (those start one each), every e2e module is
    followed by one of `spacers` (unit modules of SPACER_TESTS or more tests, one scope each)
    while they last."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}

    def key(path: str) -> tuple[int, int]:
        tier = path.split("/")[-2] if "/" in path else ""
        name = Path(path).stem
        if tier == "e2e":
            return (0, rank.get(name, len(rank)))
        return (1 if tier == "api" else 2, 0)

    order = sorted(paths, key=key)  # stable: ties keep collection order
    e2e = [p for p in order if key(p)[0] == 0]
    fill = [p for p in order if p in spacers and key(p)[0] == 2]
    rest = [p for p in order if key(p)[0] != 0 and p not in fill]
    out = e2e[:workers] + fill[:workers]
    fill = fill[workers:]
    for path in e2e[workers:]:
        out.append(path)
        if fill:
            out.append(fill.pop(0))
    return out + fill + rest
