"""`make test` runs the tiers on pytest-xdist workers (four by default), each against a lab of its
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

# The e2e modules by their time in CI (setup, call and teardown: the "time per worker" that ends
# make test's output, tests/worker_times.py; 2026-11-28, three workers), longest first; the rest
# follow in collection order. Not strictly by time at the start: the first modules start together,
# and real vLLM engines starting at once on 2 cores slow each other (three such modules together
# made a run 105 s longer, 2026-11-26), so test_autoscaling (engine stand-ins) and test_upgrade
# (one engine) go among the first.
SLOWEST_FIRST = (
    "test_scale_to_zero",  # 370 s
    "test_batchjob",  # 363 s
    "test_autoscaling",  # 316 s
    "test_upgrade",  # 205 s
    "test_spare_batch",  # 344 s
    "test_compile_cache",  # 300 s
    "test_standby",  # 125 s
    "test_resilience",  # 124 s
    "test_llmdeployment",  # 122 s
    "test_demo",  # 108 s
    "test_engine_failures",  # 105 s
    "test_engine_standin_contract",  # 96 s
    "test_dataplane",  # 93 s
    "test_plan_verified",  # 92 s (its two engines since deleted at once: about 10 s less)
    "test_why_pods_cannot_run",  # 176 s (four workers); its tables at once since: ~88 s, scaled
    "test_lora",  # 84 s
    "test_router",  # 83 s
    "test_leader_election",  # 81 s
    "test_observability",  # 70 s
    "test_observability_kv",  # 66 s
    "test_pod_security",  # 33 s
    "test_fuzz",
    "test_multinode",
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
