"""What the node runner gives a pod's processes for the adapter fetcher beside a LoRA engine: the
container's envFrom, as a kubelet resolves it, and the lab's item 21 (docs/cpu-adaptations.md): a
LoRA path vLLM is told at run time under one of the container's volumeMounts is read from the
emulated directory, through the node runner's sitecustomize, while the path vLLM reports stays the
pod's. Here against a module standing in for
vllm.lora.worker_manager (what the wrapper replaces is one function of it); the e2e test
tests/e2e/test_lora.py loads an adapter that way into the real vLLM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from localcluster.noderunner.adaptations import AMX_SITE, LAB_VOLUMES_ENV
from localcluster.noderunner.podenv import MissingKeyError, container_env, process_env
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


SECRETS = {"adapter-store": {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}}
CONFIGMAPS = {"settings": {"AWS_REGION": "eu-west-1", "LEVEL": "info"}}


def env_of(container: dict[str, Any]) -> dict[str, str]:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {}}
    return container_env(
        pod,
        container,
        {},
        ip="127.17.0.9",
        node="local-gpu-0",
        read_secret_key=lambda ns, name, key: SECRETS.get(name, {}).get(key),
        read_configmap_key=lambda ns, name, key: CONFIGMAPS.get(name, {}).get(key),
        read_secret=lambda ns, name: SECRETS.get(name),
        read_configmap=lambda ns, name: CONFIGMAPS.get(name),
    )


def test_env_from_a_secret_and_a_configmap_comes_first_and_env_wins() -> None:
    env = env_of(
        {
            "envFrom": [
                {"secretRef": {"name": "adapter-store"}},
                {"configMapRef": {"name": "settings"}, "prefix": "APP_"},
            ],
            "env": [{"name": "APP_LEVEL", "value": "debug"}],
        }
    )

    assert env["AWS_ACCESS_KEY_ID"] == "AK"
    assert env["AWS_SECRET_ACCESS_KEY"] == "SK"
    assert env["APP_AWS_REGION"] == "eu-west-1"
    assert env["APP_LEVEL"] == "debug"


def test_env_from_a_missing_secret_is_the_kubelets_refusal_unless_optional() -> None:
    with pytest.raises(MissingKeyError, match='secret "gone" not found'):
        env_of({"envFrom": [{"secretRef": {"name": "gone"}}]})

    assert "AWS_ACCESS_KEY_ID" not in env_of(
        {"envFrom": [{"secretRef": {"name": "gone", "optional": True}}]}
    )
