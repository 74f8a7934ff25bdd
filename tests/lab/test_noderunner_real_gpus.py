"""The node runner on a machine with real GPUs (dev/gpulab): vLLM runs the pod's flags as the
operator rendered them, each pod gets GPUs of its own, and the compile-cache key vLLM computes is
the one a container on a cluster would."""

from __future__ import annotations

from pathlib import Path

import pytest
from localcluster.noderunner.adaptations import Context, adapt_command, adapt_env
from localcluster.noderunner.gpurequest import requested_gpus
from localcluster.noderunner.realgpus import RealGpus, product_label

PYTHON = Path("/opt/python3")
RENDERED = [
    "serve",
    "meta-llama/Llama-3.1-8B-Instruct",
    "--tensor-parallel-size",
    "2",
    "--gpu-memory-utilization",
    "0.9",
    "--quantization",
    "fp8",
    "--max-model-len",
    "8192",
    "--host",
    "0.0.0.0",
]


def gpus(*indices: int) -> RealGpus:
    return RealGpus(indices=indices, product="NVIDIA-H200", memory_mib=143771, python=PYTHON)


def test_vllm_keeps_every_rendered_flag_but_the_bind_address_on_real_gpus() -> None:
    ctx = Context(PYTHON, "127.17.0.2", {"meta-llama/Llama-3.1-8B-Instruct": "/m"}, real_gpus=True)
    argv = adapt_command(["vllm"], RENDERED, ctx)
    assert argv[:5] == [str(PYTHON), "-m", "vllm.entrypoints.cli.main", "serve", "/m"]
    assert argv[5:] == [*RENDERED[2:10], "--host", "127.17.0.2"]
    assert "--enforce-eager" not in argv


def test_the_cpu_lab_still_adapts_the_same_flags() -> None:
    argv = adapt_command(["vllm"], RENDERED, Context(PYTHON, "127.17.0.2", {}))
    assert "--enforce-eager" in argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1"
    assert "--gpu-memory-utilization" not in argv


@pytest.mark.parametrize(
    ("real", "kv_space_set"), [(False, True), (True, False)], ids=["cpu", "real-gpus"]
)
def test_the_cpu_kv_cache_size_is_set_only_on_the_cpu(real: bool, kv_space_set: bool) -> None:
    assert ("VLLM_CPU_KVCACHE_SPACE" in adapt_env({}, real_gpus=real)) is kv_space_set


def test_each_pod_gets_gpus_of_its_own_and_frees_them_when_it_goes() -> None:
    machine = gpus(0, 1, 2, 3)
    assert machine.allocate("a", 2) == (0, 1)
    assert machine.allocate("b", 1) == (2,)
    assert machine.allocate("a", 2) == (0, 1)  # the same pod asks again: the same devices
    with pytest.raises(RuntimeError, match="2 GPUs asked, 1 free"):
        machine.allocate("c", 2)
    machine.release("a")
    assert machine.allocate("c", 2) == (0, 1)


def test_the_machines_packages_join_the_pods_and_the_pods_settings_win() -> None:
    machine = RealGpus(
        indices=(0,),
        product="NVIDIA-H200",
        memory_mib=1,
        python=PYTHON,
        env={"PYTHONPATH": "/tmp/site", "PATH": "/tmp/site/bin", "HF_HUB_OFFLINE": "1"},
    )
    env = machine.process_env(
        {"PYTHONPATH": "/src", "PATH": "/usr/bin", "HF_HUB_OFFLINE": "0", "HOME": "/x"}
    )
    assert env == {
        "PYTHONPATH": "/src:/tmp/site",
        "PATH": "/tmp/site/bin:/usr/bin",
        "HF_HUB_OFFLINE": "0",
        "HOME": "/x",
    }


def test_vllms_home_derived_cache_key_paths_are_the_containers() -> None:
    assert RealGpus.as_container_sees({"HOME": "/tmp"}) == {
        "VLLM_CONFIG_ROOT": "/tmp/.config/vllm",
        "VLLM_XLA_CACHE_PATH": "/tmp/.cache/vllm/xla_cache",
    }
    assert RealGpus.as_container_sees({}) == {}


@pytest.mark.parametrize(
    ("name", "label"),
    [("NVIDIA H200", "NVIDIA-H200"), ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3")],
)
def test_the_product_label_is_gpu_feature_discoverys(name: str, label: str) -> None:
    assert product_label(name) == label


def test_a_pods_gpus_are_its_containers_limits() -> None:
    pod = {
        "spec": {
            "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                {"resources": {"requests": {"cpu": "1"}}},
            ]
        }
    }
    assert requested_gpus(pod) == 2
