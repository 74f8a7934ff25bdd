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
