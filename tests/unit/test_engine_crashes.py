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


def test_the_same_failure_reads_the_same_on_every_restart() -> None:
    first = pod("e-0", restarts=1, message=VLLM_OOM)
    later = pod("e-0", restarts=4, message=VLLM_OOM.replace("18:00:09", "18:04:51"))
    assert crashes((first,))[0].describe() == crashes((later,))[0].describe()


NOT_CRASHING = {
    "never-restarted": pod("e-0", restarts=0),
    "restarted-and-serving-again": pod("e-0", running_ready=True),
    "exited-cleanly": pod("e-0", code=0),
    "another-container": pod("e-0", container="sidecar"),
}


@pytest.mark.parametrize("live", NOT_CRASHING.values(), ids=NOT_CRASHING.keys())
def test_engines_that_are_not_crash_looping_are_not_reported(live: dict[str, Any]) -> None:
    assert crashes((live,)) == []
