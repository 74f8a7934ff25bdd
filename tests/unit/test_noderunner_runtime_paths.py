"""The lab's item 21 (docs/cpu-adaptations.md): a LoRA path vLLM is told at run time under one of
the container's volumeMounts is read from the emulated directory, through the node runner's
sitecustomize, while the path vLLM reports stays the pod's. Here against a module standing in for
vllm.lora.worker_manager (what the wrapper replaces is one function of it); the e2e test
tests/e2e/test_lora.py loads an adapter that way into the real vLLM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from localcluster.noderunner.adaptations import AMX_SITE, LAB_VOLUMES_ENV
from localcluster.noderunner.podenv import process_env
from localcluster.noderunner.volumes import PodVolumes

PROBE = """
from vllm.lora import worker_manager
print(worker_manager.get_adapter_absolute_path({path!r}))
"""


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Path:
    package = tmp_path / "pkgs" / "vllm" / "lora"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "worker_manager.py").write_text(
        "def get_adapter_absolute_path(path):\n    return 'resolved:' + path\n"
    )
    return tmp_path / "pkgs"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/var/lib/llmfleet/adapters/abc", "resolved:{host}/abc"),
        ("/var/lib/llmfleet/adapters", "resolved:{host}"),
        ("/var/lib/llmfleet/adaptersX/abc", "resolved:/var/lib/llmfleet/adaptersX/abc"),
        ("/home/ci/adapters/sql", "resolved:/home/ci/adapters/sql"),
        ("org/sql-lora", "resolved:org/sql-lora"),
    ],
    ids=["under-the-mount", "the-mount", "a-sibling", "a-host-path", "a-hub-id"],
)
def test_vllms_workers_read_a_mounted_path_from_the_emulated_directory(
    fake_vllm: Path, tmp_path: Path, path: str, expected: str
) -> None:
    host = str(tmp_path / "emptydir" / "adapter-fetch")
    env = {
        "PYTHONPATH": f"{AMX_SITE}:{fake_vllm}",
        LAB_VOLUMES_ENV: json.dumps({"/var/lib/llmfleet/adapters": host, "/tmp": "/x/tmp"}),
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(path=path)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )

    assert out.stdout.strip() == expected.format(host=host)


def test_every_pod_process_is_given_its_containers_mounts() -> None:
    mounts = PodVolumes(paths={"/var/lib/llmfleet/adapters": "/state/v/uid/emptydir/a"})

    env = process_env({"HOME": "/tmp"}, mounts)

    assert json.loads(env[LAB_VOLUMES_ENV]) == mounts.paths
    assert LAB_VOLUMES_ENV not in process_env({}, PodVolumes())
