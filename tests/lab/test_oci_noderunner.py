"""How the node runner runs the chart's operator container from its built image
(dev/localcluster/noderunner/oci.py): the OCI config it writes for the pod `helm template`
renders (bundle.py), and which images it finds built (images.py). The e2e test
(tests/e2e/test_operator_pod.py) runs it with crun."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from chartrender import operator_deployment, render
from localcluster.noderunner import bundle, images
from localcluster.noderunner.adaptations import bind_pod_ip
from localcluster.noderunner.volumes import PodVolumes

POD_IP = "127.17.0.9"
# What `umoci unpack` writes for the operator image (its user, env, capabilities, mounts).
UMOCI_CONFIG = {
    "process": {
        "terminal": True,
        "user": {"uid": 65532, "gid": 65532},
        "args": ["llmfleet", "run"],
        "env": ["PATH=/usr/local/bin:/usr/bin:/bin", "PYTHONUNBUFFERED=1"],
        "cwd": "/tmp",
        "capabilities": {k: ["CAP_KILL"] for k in ("bounding", "effective", "permitted")},
        "noNewPrivileges": True,
    },
    "root": {"path": "rootfs"},
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
    "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "mount"}]},
}
IMAGE_CONFIG = {"Entrypoint": ["llmfleet"], "Cmd": ["run"], "User": "65532:65532"}


def chart_pod(*values: str) -> dict[str, Any]:
    template = operator_deployment(render(*values))["spec"]["template"]
    return {
        "metadata": {"name": "fleet-abc", "namespace": "llmfleet-system", "uid": "u1"},
        "spec": template["spec"],
    }


@pytest.fixture
def unpacked(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(UMOCI_CONFIG))
    (tmp_path / "image-config.json").write_text(json.dumps(IMAGE_CONFIG))
    return tmp_path


def config_of(pod: dict[str, Any], unpacked: Path) -> dict[str, Any]:
    (spec,) = pod["spec"]["containers"]
    args = bind_pod_ip(bundle.argv(spec, IMAGE_CONFIG), POD_IP)
    mounts = PodVolumes({m["mountPath"]: f"/host{m['mountPath']}" for m in spec["volumeMounts"]})
    request = bundle.Request(pod, spec, args, {"POD_NAME": "fleet-abc"}, mounts)
    return bundle.bundle_config(unpacked, request, unpacked / "rootfs")


def test_the_chart_pod_runs_read_only_as_its_user_without_capabilities(unpacked: Path) -> None:
    config = config_of(chart_pod(), unpacked)
    assert config["root"]["readonly"] is True
    assert config["process"]["user"] == {"uid": 65532, "gid": 65532}
    assert all(not caps for caps in config["process"]["capabilities"].values())
    assert config["process"]["noNewPrivileges"] is True
    # The host's loopback, no network namespace; the hostname is the pod's.
    assert {"type": "network"} not in config["linux"]["namespaces"]
    assert config["hostname"] == "fleet-abc"


def test_the_chart_command_binds_the_pod_ip_and_mounts_its_volumes(unpacked: Path) -> None:
    config = config_of(chart_pod(), unpacked)
    args = config["process"]["args"]
    assert args[:2] == ["llmfleet", "run"]
    assert f"--liveness=http://{POD_IP}:8080/healthz" in args
    assert f"--metrics-host={POD_IP}" in args
    assert not any("0.0.0.0" in a for a in args)
    mounts = {m["destination"]: m["options"] for m in config["mounts"] if m["type"] == "bind"}
    assert mounts["/tmp"] == ["rbind", "rw"]
    assert mounts["/etc/llmfleet"] == ["rbind", "ro"]
    # The pod's env after the image's.
    assert {"PYTHONUNBUFFERED=1", "POD_NAME=fleet-abc"} <= set(config["process"]["env"])


def test_a_root_user_is_refused_under_run_as_non_root(unpacked: Path) -> None:
    with pytest.raises(bundle.ContainerConfigError, match="runAsNonRoot"):
        config_of(chart_pod("podSecurityContext.runAsUser=0"), unpacked)


def test_command_and_args_replace_the_images_entrypoint_and_cmd_as_kubernetes_does() -> None:
    assert bundle.argv({}, IMAGE_CONFIG) == ["llmfleet", "run"]
    assert bundle.argv({"args": ["plan"]}, IMAGE_CONFIG) == ["llmfleet", "plan"]
    assert bundle.argv({"command": ["sh"]}, IMAGE_CONFIG) == ["sh"]


def test_only_images_built_here_are_found_by_the_name_in_their_archive(tmp_path: Path) -> None:
    index = {
        "manifests": [
            {
                "digest": "sha256:abc",
                "annotations": {images.REF_ANNOTATION: "docker.io/llmfleet/operator:0.2.0"},
            }
        ]
    }
    (tmp_path / "index.json").write_text(json.dumps(index))
    with tarfile.open(tmp_path / "operator.oci.tar", "w") as tar:
        tar.add(tmp_path / "index.json", arcname="index.json")
    assert images.find_image("docker.io/llmfleet/operator:0.2.0", tmp_path) is not None
    assert images.find_image("llmfleet/operator:0.2.0", tmp_path) is not None
    assert images.find_image("docker.io/llmfleet/operator@sha256:abc", tmp_path) is not None
    assert images.find_image("docker.io/llmfleet/operator:0.1.0", tmp_path) is None
    assert images.find_image("vllm/vllm-openai:v0.32.0", tmp_path) is None
    # The router's archive exists after `make images`, but router pods run as processes.
    (tmp_path / "operator.oci.tar").rename(tmp_path / "router.oci.tar")
    assert images.find_image("docker.io/llmfleet/operator:0.2.0", tmp_path) is None
