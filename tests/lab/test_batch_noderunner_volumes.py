"""The node runner's volume emulation, which LLMBatchJob pods on the local cluster rely on:
claims, ConfigMaps and emptyDirs as directories, mounted paths rewritten, termination messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from localcluster.noderunner.volumes import (
    PodVolumes,
    VolumeNotReadyError,
    cleanup,
    prepare,
    termination_message,
)


def pod(*volumes: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "uid": "u1", "name": "p"},
        "spec": {"volumes": list(volumes)},
    }


def container(*mounts: tuple[str, str]) -> dict[str, Any]:
    return {
        "name": "runner",
        "volumeMounts": [{"name": n, "mountPath": m} for n, m in mounts],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


CONFIGMAPS = {"prompts": {"in.jsonl": '{"a": 1}\n', "other": "x"}}


def read(ns: str, name: str) -> dict[str, str] | None:
    return CONFIGMAPS.get(name)


def test_a_claim_is_a_directory_per_namespace_and_claim_kept_after_the_pod(
    tmp_path: Path,
) -> None:
    v = prepare(
        pod({"name": "d", "persistentVolumeClaim": {"claimName": "data"}}),
        container(("d", "/llmfleet/claims/data")),
        tmp_path,
        read,
    )
    host = tmp_path / "pvcs" / "ns" / "data"
    assert host.is_dir()
    assert v.rewrite("/llmfleet/claims/data/in/x.jsonl") == f"{host}/in/x.jsonl"
    cleanup(tmp_path, "u1")
    assert host.is_dir()


def test_a_configmap_volume_holds_its_items_as_files(tmp_path: Path) -> None:
    volume = {
        "name": "input",
        "configMap": {"name": "prompts", "items": [{"key": "in.jsonl", "path": "input.jsonl"}]},
    }
    v = prepare(pod(volume), container(("input", "/llmfleet/input")), tmp_path, read)
    path = Path(v.rewrite("/llmfleet/input/input.jsonl"))
    assert path.read_text() == '{"a": 1}\n'
    assert not (path.parent / "other").exists()


def test_a_missing_configmap_keeps_the_container_waiting(tmp_path: Path) -> None:
    volume = {"name": "input", "configMap": {"name": "absent"}}
    with pytest.raises(VolumeNotReadyError, match="absent"):
        prepare(pod(volume), container(("input", "/in")), tmp_path, read)


REWRITES = {
    "below-a-mount": ("/tmp/x/y", "/host/tmp/x/y"),
    "the-mount-itself": ("/tmp", "/host/tmp"),
    "a-flag-with-equals": ("--output-dir=/data/out", "--output-dir=/host/data/out"),
    "the-longest-mount-wins": ("/data/cache/m", "/host/cache/m"),
    "a-prefix-that-is-not-a-directory": ("/tmpfile", "/tmpfile"),
    "not-a-path": ("llmfleet-test/tiny-llama", "llmfleet-test/tiny-llama"),
}


@pytest.mark.parametrize(("value", "expected"), REWRITES.values(), ids=REWRITES.keys())
def test_paths_under_a_mount_are_rewritten_to_the_emulated_directory(
    value: str, expected: str
) -> None:
    v = PodVolumes(paths={"/tmp": "/host/tmp", "/data": "/host/data", "/data/cache": "/host/cache"})
    assert v.rewrite(value) == expected


def test_the_termination_message_comes_from_its_file_else_the_log_of_a_failure(
    tmp_path: Path,
) -> None:
    v = prepare(pod(), container(), tmp_path, read)
    log = tmp_path / "pod.log"
    log.write_text("loading\nValueError: boom\n")
    assert v.rewrite("/dev/termination-log") == str(v.termination_log)
    assert termination_message(v, 1, "FallbackToLogsOnError", log).endswith("ValueError: boom")
    assert termination_message(v, 0, "FallbackToLogsOnError", log) == ""
    assert termination_message(v, 1, "File", log) == ""
    assert v.termination_log is not None
    v.termination_log.write_text('{"shard": 0}')
    assert termination_message(v, 1, "FallbackToLogsOnError", log) == '{"shard": 0}'


RUN_1 = "\n===== 2026-11-28T04:58:45Z node-runner: start vllm (restart 0) on 127.17.0.3: [...]\n"
RUN_2 = "\n===== 2026-11-28T04:58:56Z node-runner: start vllm (restart 1) on 127.17.0.3: [...]\n"
EXITED = "\n===== 2026-11-28T04:58:46Z node-runner: vllm exited 137 (OOMKilled) \n"
# The pod's log (the runner's lines among the container's) -> what the last instance wrote.
FALLBACKS = {
    "killed-before-it-wrote-anything": (f"{RUN_1}{EXITED}", ""),
    "the-last-instance-only": (
        f"{RUN_1}loading\nValueError: first{EXITED}{RUN_2}loading\nValueError: second\n",
        "loading\nValueError: second",
    ),
    "a-log-without-the-runners-lines": ("loading\nValueError: boom\n", "loading\nValueError: boom"),
}


@pytest.mark.parametrize(("log", "expected"), FALLBACKS.values(), ids=FALLBACKS)
def test_the_log_fallback_is_what_the_last_instance_wrote_and_not_the_runners_lines(
    tmp_path: Path, log: str, expected: str
) -> None:
    path = tmp_path / "pod.log"
    path.write_text(log)
    assert termination_message(None, 137, "FallbackToLogsOnError", path) == expected


def test_a_checkout_under_tmp_stays_importable_beside_a_pods_tmp_emptydir(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A clean clone in /tmp and a batch pod with an emptyDir at /tmp (read-only root filesystem):
    # the runner's PYTHONPATH entry is a host path and must not be mapped into the emptyDir.
    from localcluster.noderunner import adaptations, podenv

    checkout_src = Path("/tmp/ci-clone/operator/src")
    monkeypatch.setattr(adaptations, "LLMFLEET_SRC", checkout_src)
    mounts = PodVolumes(paths={"/tmp": "/host/volumes/u1/tmp"})
    env = podenv.process_env({"PYTHONPATH": "/tmp/pod-libs", "TMPDIR": "/tmp"}, mounts)
    assert env["PYTHONPATH"].split(":") == [
        str(checkout_src),
        str(adaptations.AMX_SITE),
        "/host/volumes/u1/tmp/pod-libs",
    ]
    assert env["TMPDIR"] == "/host/volumes/u1/tmp"
