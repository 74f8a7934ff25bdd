"""An engine that keeps exiting at start shows in status with its last words and, when it ran out
of memory, what to change (llmfleet.reconcile.llmdeployment.engine_crashes.crashes)."""

from __future__ import annotations

from typing import Any

import pytest

from llmfleet.reconcile.llmdeployment.engine_crashes import crashes
from llmfleet.reconcile.machinery.exit_words import OUT_OF_MEMORY_ADVICE


def pod(
    name: str,
    *,
    restarts: int = 3,
    reason: str = "Error",
    code: int = 1,
    message: str = "",
    running_ready: bool = False,
    container: str = "vllm",
) -> dict[str, Any]:
    state: dict[str, Any] = (
        {"running": {}} if running_ready else {"waiting": {"reason": "CrashLoopBackOff"}}
    )
    return {
        "metadata": {"name": name},
        "status": {
            "containerStatuses": [
                {
                    "name": container,
                    "restartCount": restarts,
                    "ready": running_ready,
                    "state": state,
                    "lastState": {
                        "terminated": {"reason": reason, "exitCode": code, "message": message}
                    },
                }
            ]
        },
    }


VLLM_OOM = (
    "INFO 11-23 18:00:01 [gpu_worker.py:1] Loading weights\n"
    "ERROR 11-23 18:00:09 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to "
    "allocate 1.96 GiB\n"
)
NO_KV = (
    "ERROR 11-23 18:00:09 [core.py:700] ValueError: No available memory for the cache blocks. "
    "Try increasing `gpu_memory_utilization` when initializing the engine.\n"
)
BAD_TOKEN = (
    "ERROR 11-23 18:00:03 [api_server.py:1] OSError: You are trying to access a gated repo. "
    "401 Client Error: Unauthorized\n"
)

CASES = {
    "cuda-out-of-memory": (pod("e-0", message=VLLM_OOM), "CUDA out of memory", True),
    "no-room-for-kv-cache": (pod("e-0", message=NO_KV), "No available memory", True),
    "killed-for-host-memory": (pod("e-0", reason="OOMKilled", code=137), "OOMKilled", True),
    "gated-model-bad-token": (pod("e-0", message=BAD_TOKEN), "401 Client Error", False),
}


@pytest.mark.parametrize(("pods", "said", "oom"), CASES.values(), ids=CASES.keys())
def test_a_crash_looping_engine_is_reported_with_its_last_words(
    pods: dict[str, Any], said: str, oom: bool
) -> None:
    (crash,) = crashes((pods,))
    text = crash.describe()
    assert said in text
    assert "engine pod e-0 keeps exiting" in text
    assert (OUT_OF_MEMORY_ADVICE in text) is oom


# A log's last line as two restarts write it: the same failure, another time.
LOG_FORMATS = {
    "vllm": (
        "ERROR 11-23 18:00:09 [core.py:700] ValueError: bad",
        "ERROR 11-23 18:04:51 [core.py:700] ValueError: bad",
    ),
    "python-logging-default": (
        "2026-11-28 05:11:22,174 [stand-in] ValueError: bad",
        "2026-11-28 05:11:43,020 [stand-in] ValueError: bad",
    ),
    "python-logging-with-level": (
        "2026-11-28 05:11:22,174 ERROR engine: ValueError: bad",
        "2026-11-28 05:12:01,999 ERROR engine: ValueError: bad",
    ),
    "rfc3339": (
        "2026-11-28T05:11:22.174Z ValueError: bad",
        "2026-11-28T05:11:43.020Z ValueError: bad",
    ),
}


@pytest.mark.parametrize(("first", "later"), LOG_FORMATS.values(), ids=LOG_FORMATS)
def test_the_same_failure_reads_the_same_on_every_restart(first: str, later: str) -> None:
    said = [
        crashes((pod("e-0", restarts=n, message=m),))[0].describe()
        for n, m in ((1, first), (4, later))
    ]
    assert said[0] == said[1]
    assert "ValueError: bad" in said[0]


NOT_CRASHING = {
    "never-restarted": pod("e-0", restarts=0),
    "restarted-and-serving-again": pod("e-0", running_ready=True),
    "exited-cleanly": pod("e-0", code=0),
    "another-container": pod("e-0", container="sidecar"),
}


@pytest.mark.parametrize("live", NOT_CRASHING.values(), ids=NOT_CRASHING.keys())
def test_engines_that_are_not_crash_looping_are_not_reported(live: dict[str, Any]) -> None:
    assert crashes((live,)) == []
