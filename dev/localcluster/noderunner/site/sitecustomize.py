"""Imported at start-up by every python a pod on the node runner starts (adaptations.py, item 16).

vLLM 0.32's CPU attention picks its AMX kernel whenever the CPU reports AMX tiles
(`torch.cpu._is_amx_tile_supported()`), but on Linux a process must first ask the kernel for the
AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); nothing in vLLM's eager path
asks, so the worker dies of SIGILL on its first request on Sapphire Rapids and later hosts. Asking
once per process is what oneDNN does for its own AMX kernels. On a CPU without AMX the call fails
and changes nothing.
"""

import contextlib
import ctypes
import platform

SYS_ARCH_PRCTL = 158  # x86_64
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18

if platform.machine() == "x86_64":
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)


# Item 21 (adaptations.py "runtime-paths"): a pod's processes here see the host's filesystem, and
# the node runner rewrites paths under a volumeMount on the command line only. The operator tells
# vLLM a LoRA adapter's path over its API at run time (an adapter the pod's fetcher copied into an
# emptyDir), so vLLM's workers map such a path to the emulated directory when they read it, as
# the mount would in a pod. What vLLM lists and logs stays the pod's path.
def _map_lora_paths(volumes_json: str) -> None:
    import importlib.abc
    import importlib.util
    import json
    import sys

    mounts = json.loads(volumes_json)

    def host(path: str) -> str:
        for mount in sorted(mounts, key=len, reverse=True):
            if path == mount or path.startswith(mount.rstrip("/") + "/"):
                return str(mounts[mount]) + path[len(mount.rstrip("/")) :]
        return path

    class _Patch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
            if name != "vllm.lora.worker_manager":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None:
                return spec
            load = spec.loader.exec_module

            def exec_module(module):  # type: ignore[no-untyped-def]
                load(module)
                resolve = module.get_adapter_absolute_path
                module.get_adapter_absolute_path = lambda p: resolve(host(p))

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, _Patch())


def _lab_volumes() -> str:
    import os

    return os.environ.get("LLMFLEET_LAB_VOLUMES", "")


if _lab_volumes():
    _map_lora_paths(_lab_volumes())
