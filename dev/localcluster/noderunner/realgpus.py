"""A node runner on a machine with real NVIDIA GPUs (dev/gpulab): its node advertises the GPUs that
nvidia-smi reports, under the labels GPU Operator's feature discovery gives them, and each pod that
requests `nvidia.com/gpu` gets that many devices of its own through CUDA_VISIBLE_DEVICES, as the
NVIDIA device plugin hands them out. vLLM then runs the operator's command line unchanged except for
the bind address and the model table (adaptations.py, `Context.real_gpus`): no CPU adaptation.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# What a vLLM process needs from the runner's own environment on the GPU machine (the bundle's
# site-packages, its offline switches, CUDA's settings); nothing else of the runner's leaks in.
PASSED_ENV_PREFIXES = ("VLLM_", "HF_", "TRANSFORMERS_", "CUDA_", "NCCL_", "TORCH", "TRITON_")
PASSED_ENV = ("LD_LIBRARY_PATH", "PATH")
# The pods' PYTHONPATH (the GPU bundle's site-packages): not the runner's own, which holds the
# lab's packages (a newer pydantic than vLLM's, for one).
POD_PYTHONPATH_ENV = "LLMFLEET_GPU_PYTHONPATH"


def product_label(name: str) -> str:
    """nvidia-smi's name as GPU feature discovery labels it: "NVIDIA H200" -> "NVIDIA-H200"."""
    return "-".join(name.split())


@dataclass
class RealGpus:
    indices: tuple[int, ...]
    product: str  # the nvidia.com/gpu.product label value
    memory_mib: int
    python: Path  # the Python that has vLLM (the GPU bundle's: python3 with its PYTHONPATH)
    env: Mapping[str, str] = field(default_factory=dict)
    _held: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def detect(cls, python: Path) -> RealGpus:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
        if not rows:
            raise RuntimeError("nvidia-smi lists no GPU")
        env = {
            k: v
            for k, v in os.environ.items()
            if k in PASSED_ENV or k.startswith(PASSED_ENV_PREFIXES)
        }
        env.pop("CUDA_VISIBLE_DEVICES", None)  # each pod gets its own
        env["PYTHONPATH"] = os.environ.get(POD_PYTHONPATH_ENV, "")
        return cls(
            indices=tuple(int(r[0]) for r in rows),
            product=product_label(rows[0][1]),
            memory_mib=int(float(rows[0][2])),
            python=python,
            env=env,
        )

    def process_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """A pod process's environment plus what vLLM needs from this machine. Added after the
        pod's paths were mapped to its volumes: /tmp/site (the bundle) is a host path, not the
        pod's /tmp. The pod's own settings win; PYTHONPATH and PATH are joined."""
        out = dict(env)
        for key, value in self.env.items():
            if key == "PYTHONPATH":
                out[key] = ":".join(filter(None, (out.get(key), value)))
            elif key == "PATH":
                out[key] = ":".join(filter(None, (value, out.get(key))))
            else:
                out.setdefault(key, value)
        return out

    @staticmethod
    def as_container_sees(pod_env: Mapping[str, str]) -> dict[str, str]:
        """vLLM's paths that default from HOME and enter its torch.compile cache key
        (envs.compile_factors(), vLLM 0.26: VLLM_CONFIG_ROOT, VLLM_XLA_CACHE_PATH), as the
        container computes them from its own HOME. Here HOME becomes a directory of this pod
        alone, which would give every pod a key of its own and the compile cache on a claim
        would never hit; on a cluster every pod's HOME is the same /tmp."""
        home = pod_env.get("HOME")
        if not home:
            return {}
        return {
            "VLLM_CONFIG_ROOT": f"{home}/.config/vllm",
            "VLLM_XLA_CACHE_PATH": f"{home}/.cache/vllm/xla_cache",
        }

    def allocate(self, pod_uid: str, count: int) -> tuple[int, ...]:
        """The devices of `pod_uid` (the same on every call for one pod): `count` not held by
        another pod. The scheduler admitted the pod against the node's capacity, so a shortfall
        means a pod's processes outlived it; RuntimeError says so rather than share a GPU."""
        with self._lock:
            if pod_uid in self._held:
                return self._held[pod_uid]
            taken = {i for held in self._held.values() for i in held}
            free = [i for i in self.indices if i not in taken]
            if count > len(free):
                raise RuntimeError(f"{count} GPUs asked, {len(free)} free ({sorted(taken)} held)")
            self._held[pod_uid] = tuple(free[:count])
            return self._held[pod_uid]

    def release(self, pod_uid: str) -> None:
        with self._lock:
            self._held.pop(pod_uid, None)
