"""crun, the OCI runtime that runs containers of built images: the commands that run a bundle in
the foreground and exec into a running container, and how it copes with this host's cgroups."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

CGROUP_V2 = Path("/sys/fs/cgroup/unified")


class Runtime:
    """crun, with its state under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _crun(self, *args: str) -> list[str]:
        return ["crun", "--root", str(self.root), "--cgroup-manager=disabled", *args]

    def run_argv(self, bundle: Path, container_id: str) -> list[str]:
        """The command that runs the container in the foreground: its exit status is the
        container's, and it passes SIGTERM on to the container's process."""
        self.root.mkdir(parents=True, exist_ok=True)
        # A container of this id left by a killed run would block the name.
        subprocess.run(
            self._crun("delete", "--force", container_id), capture_output=True, check=False
        )
        return self._wrap(self._crun("run", "--bundle", str(bundle), container_id))

    def exec_argv(self, container_id: str, *command: str) -> list[str]:
        """A command run in the running container, as its process's user (`kubectl exec`; crun's
        own default is root)."""
        user = self._state(container_id).get("user") or {"uid": 0, "gid": 0}
        who = f"{user['uid']}:{user['gid']}"
        return self._wrap(self._crun("exec", "--user", who, container_id, *command))

    def _wrap(self, run: list[str]) -> list[str]:
        # crun 1.8 refuses a host whose cgroup v2 hierarchy beside the v1 ones has controllers;
        # with cgroups disabled it needs neither, so it runs where that hierarchy is unmounted.
        if _hybrid_cgroups():
            return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    f'umount {CGROUP_V2} && exec "$@"', "sh", *run]  # fmt: skip
        return run

    def _state(self, container_id: str) -> dict[str, Any]:
        """crun's state of the container, with its process's user from its bundle."""
        out = subprocess.run(
            self._crun("state", container_id), capture_output=True, text=True, check=False
        )
        try:
            state: dict[str, Any] = json.loads(out.stdout)
            bundle = json.loads((Path(state["bundle"]) / "config.json").read_text())
        except (ValueError, KeyError, OSError):
            return {}
        return {**state, "user": bundle["process"].get("user")}

    def pid(self, container_id: str) -> int | None:
        """The container's main process, as the host sees it."""
        return int(self._state(container_id).get("pid") or 0) or None


def _hybrid_cgroups() -> bool:
    """cgroup v1 hierarchies with the v2 one mounted beside them (systemd's "hybrid" layout)."""
    out = subprocess.run(
        ["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() != "cgroup2fs" and os.path.ismount(CGROUP_V2)
