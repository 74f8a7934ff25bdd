"""The lab's nodes do not start a container whose command its image does not hold, as a kubelet's
runtime cannot, with the kubelet's reasons, messages, back-off and Events
(dev/localcluster/containerstart.py; the kwok gate and the node runner both ask it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kwokgate_fakes import FakeCore
from localcluster import containerstart, imagepull, kwokgate, podrefs
from localcluster.noderunner.container import container_status
from podworkers import pod_worker

from llmfleet.models import DEFAULT_BATCH_IMAGE, DEFAULT_ENGINE_IMAGE
from llmfleet.models.defaults import DEFAULT_FETCHER_IMAGE
from llmfleet.models.router import DEFAULT_ROUTER_IMAGE

NOT_IN_PATH = "executable file not found in $PATH"

# image, command -> what the runtime says of it (a part of its error), or None: it starts.
DECISIONS: dict[str, tuple[str, str, str | None]] = {
    "engine-image-runs-vllm": (DEFAULT_ENGINE_IMAGE, "vllm", None),
    "batch-image-runs-the-runner": (DEFAULT_BATCH_IMAGE, "python3", None),
    "router-image-runs-the-router": (DEFAULT_ROUTER_IMAGE, "vllm-router", None),
    "fetcher-image-runs-llmfleet": (DEFAULT_FETCHER_IMAGE, "llmfleet", None),
    "busybox-sleeps": ("busybox", "sleep", None),
    "other-tag-of-a-known-image": ("vllm/vllm-openai:v0.31.0", "vllm", None),
    "operator-image-has-no-vllm": (
        "docker.io/llmfleet/operator:0.2.0",
        "vllm",
        f'exec: "vllm": {NOT_IN_PATH}',
    ),
    "fetcher-image-has-no-vllm": (DEFAULT_FETCHER_IMAGE, "vllm", f'exec: "vllm": {NOT_IN_PATH}'),
    "busybox-has-no-python": ("busybox:1.36", "python3", f'exec: "python3": {NOT_IN_PATH}'),
    "router-image-has-no-vllm": (DEFAULT_ROUTER_IMAGE, "vllm", f'exec: "vllm": {NOT_IN_PATH}'),
    "absolute-path-not-there": (
        "busybox",
        "/usr/bin/python3",
        'exec: "/usr/bin/python3": stat /usr/bin/python3: no such file or directory',
    ),
    "unknown-image-not-judged": ("registry.invalid/x:1", "vllm", None),
    "unknown-command-not-judged": ("busybox", "wget", None),
    "expanded-command-not-judged": ("busybox", "$(ENGINE)", None),
}


@pytest.mark.parametrize(("image", "command", "said"), DECISIONS.values(), ids=DECISIONS.keys())
def test_a_container_starts_only_where_its_image_holds_its_command(
    image: str, command: str, said: str | None
) -> None:
    error = containerstart.start_error(image, command)
    if said is None:
        assert error is None
    else:
        assert error is not None
        assert said in error
        assert error.startswith("failed to create containerd task: ")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod(
    image: str = "busybox", command: str = "python3", policy: str | None = None, **container: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "vllm", "image": image, "command": [command], **container}]
    }
    if policy:
        spec["restartPolicy"] = policy
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}


def said(r: podrefs.Refusal | None) -> tuple[str, int, list[str]]:
    assert r is not None
    notes = [*r.earlier, podrefs.Note("Warning", r.event_reason, r.event_message)]
    return r.waiting_reason, r.restarts, [f"{n.type} {n.reason}" for n in notes]


def test_a_command_not_in_the_image_crash_loops_with_the_kubelets_back_off_and_events() -> None:
    clock = Clock()
    starter = containerstart.Starter(clock)
    p = pod()
    c = p["spec"]["containers"][0]
    seen = []
    messages = []
    for wait in (0, 2, 9, 1, 18, 1):  # at 0, 2, 11, 12, 30 and 31 s
        clock.now += wait
        refused = starter.check(p, c)
        seen.append(said(refused))
        messages.append(refused.waiting_message if refused else "")
    start = ["Normal Created", "Warning Failed"]
    # Attempts at 0 s, 11 s (past 10 s) and 31 s (past 11 + 20): the back-off doubles.
    assert seen == [
        ("RunContainerError", 0, start),
        ("CrashLoopBackOff", 0, ["Warning BackOff"]),
        ("RunContainerError", 1, start),
        ("CrashLoopBackOff", 1, ["Warning BackOff"]),
        ("CrashLoopBackOff", 1, ["Warning BackOff"]),
        ("RunContainerError", 2, start),
    ]
    assert [m.split(" restarting")[0] for m in messages[1::2]] == [
        "back-off 10s",
        "back-off 20s",
        "failed to create containerd task: failed to create shim task: OCI runtime create "
        "failed: runc create failed: unable to start container process: error during container "
        'init: exec: "python3": executable file not found in $PATH: unknown',
    ]


def test_the_crash_loop_is_said_in_the_kubelets_words() -> None:
    clock = Clock()
    starter = containerstart.Starter(clock)
    p = pod()
    first = starter.check(p, p["spec"]["containers"][0])
    clock.now += 1
    loop = starter.check(p, p["spec"]["containers"][0])
    assert first is not None
    assert loop is not None
    error = containerstart.start_error("busybox", "python3")
    assert (first.waiting_message, first.event_message) == (error, f"Error: {error}")
    assert first.earlier == (podrefs.Note("Normal", "Created", "Created container: vllm"),)
    assert loop.waiting_message == "back-off 10s restarting failed container=vllm pod=p_ns(u)"
    assert loop.event_message == "Back-off restarting failed container vllm in pod p_ns(u)"
    status = podrefs.waiting_status(p, loop)
    (cs,) = status["containerStatuses"]
    assert status["phase"] == "Pending"
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    ended = cs["lastState"]["terminated"]
    assert (ended["reason"], ended["exitCode"], ended["message"]) == ("StartError", 128, error)


def test_a_jobs_pod_whose_command_is_not_in_the_image_fails_with_start_error() -> None:
    p = pod(policy="Never")
    refused = containerstart.Starter(Clock()).check(p, p["spec"]["containers"][0])
    assert refused is not None
    assert refused.ended
    status = podrefs.waiting_status(p, refused)
    (cs,) = status["containerStatuses"]
    assert status["phase"] == "Failed"
    ended = cs["state"]["terminated"]
    assert (ended["reason"], ended["exitCode"]) == ("StartError", 128)
    assert NOT_IN_PATH in ended["message"]


def test_the_start_comes_after_the_environment() -> None:
    env = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}]
    p = pod(env=env)
    starter = containerstart.Starter(Clock())
    refused = podrefs.check(p, lambda kind, ns, name: None, start=starter.check)
    assert refused is not None
    assert refused.waiting_reason == "CreateContainerConfigError"
    refused = podrefs.check(p, lambda kind, ns, name: {"token"}, start=starter.check)
    assert refused is not None
    assert refused.waiting_reason == "RunContainerError"


def kwok_pod(image: str, uid: str, policy: str | None = None) -> dict[str, Any]:
    p = pod(image, "vllm", policy)
    p["metadata"] |= {"name": f"p-{uid}", "uid": uid}
    p["spec"]["nodeName"] = "kwok-gpu-0"
    p["status"] = {"phase": "Pending"}
    return p


GATE_CASES = {
    "deployment-pod": (None, ["RunContainerError", "CrashLoopBackOff"], "Pending"),
    "job-pod": ("Never", ["StartError"], "Failed"),
}


@pytest.mark.parametrize(("policy", "reasons", "phase"), GATE_CASES.values(), ids=GATE_CASES)
def test_the_kwok_gate_does_not_start_an_engine_whose_image_has_no_vllm(
    policy: str | None, reasons: list[str], phase: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = kwokgate.Gate(client.ApiClient())
    core = FakeCore()
    gate.core = core  # type: ignore[assignment]
    gate.lookup = lambda kind, namespace, name: set()
    wrong = kwok_pod(DEFAULT_FETCHER_IMAGE, "bad", policy)
    monkeypatch.setattr(
        imagepull, "held_images", lambda: frozenset({imagepull.normalised(DEFAULT_FETCHER_IMAGE)})
    )
    gate.consider(wrong)
    gate.consider(wrong)  # the retry, within the back-off
    assert core.admitted == []
    written = []
    for s in core.statuses:
        state = s["containerStatuses"][0]["state"]
        written.append((state.get("waiting") or state.get("terminated") or {})["reason"])
    assert written == reasons
    assert core.statuses[-1]["phase"] == phase
    assert [e["reason"] for e in core.events][:2] == ["Created", "Failed"]
    gate.forget("bad")  # deleted; its replacement names the engine image
    monkeypatch.setattr(
        imagepull, "held_images", lambda: frozenset({imagepull.normalised(DEFAULT_ENGINE_IMAGE)})
    )
    gate.consider(kwok_pod(DEFAULT_ENGINE_IMAGE, "good", policy))
    assert core.admitted == ["p-good"]


@pytest.mark.parametrize(("policy", "finished"), [("Always", False), ("Never", True)])
def test_the_node_runner_does_not_start_a_process_its_image_cannot_run(
    policy: str, finished: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        imagepull, "held_images", lambda: frozenset({"docker.io/library/busybox:1"})
    )
    posted: list[dict[str, Any]] = []

    worker = pod_worker(pod("busybox:1", "python3", policy), tmp_path, posted)
    (c,) = worker.containers
    worker._start(c)
    assert c.proc is None
    assert c.finished is finished
    status = container_status(c)
    ended = status["state"]["terminated"] if finished else status["lastState"]["terminated"]
    assert (ended["reason"], ended["exitCode"]) == ("StartError", 128)
    assert NOT_IN_PATH in ended["message"]
    said = [(e["type"], e["reason"]) for e in posted]
    assert said[:2] == [("Normal", "Created"), ("Warning", "Failed")]
    if not finished:
        waiting = status["state"]["waiting"]
        assert waiting == {
            "reason": "CrashLoopBackOff",
            "message": "back-off 10s restarting failed container=vllm pod=p_ns(u)",
        }
        assert said[2:] == [("Warning", "BackOff")]
        assert posted[2]["message"] == "Back-off restarting failed container vllm in pod p_ns(u)"
