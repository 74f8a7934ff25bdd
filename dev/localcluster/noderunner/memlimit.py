"""A process container's memory limit, enforced as a node's cgroup enforces it: the node runner
has no cgroups (docs/cpu-adaptations.md), so without this a container over
`resources.limits.memory` ran on where a kubelet's node kills it and reports `OOMKilled`.

What the kernel charges a container's cgroup is approximated by the proportional set size (Pss,
/proc/PID/smaps_rollup) summed over the container's processes: shared pages (vLLM's engine core
and workers share torch's libraries) count once in all, as a cgroup charges them once. Past the
limit the whole container is killed (the kubelet sets `memory.oom.group` on cgroup v2 since
Kubernetes 1.28) and its exit reads as the kubelet reports it: terminated `OOMKilled`, exit code
137 (128 + SIGKILL). The check runs every CHECK_SECONDS, so a spike shorter than that passes,
where the kernel's would not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kubernetes.utils import parse_quantity

CHECK_SECONDS = 1.0
OOM_EXIT_CODE = 137
OOM_REASON = "OOMKilled"


def limit_bytes(container: Mapping[str, Any]) -> int | None:
    """The container's `resources.limits.memory` in bytes, or None without one."""
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    if limit is None:
        return None
    return int(parse_quantity(str(limit)))


def charged_bytes(pids: Iterable[int]) -> int:
    """What the processes `pids` hold in memory, shared pages counted once in all (their Pss)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024  # kB
                    break
    return total
