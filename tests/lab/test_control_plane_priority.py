"""The local control plane and the instruments run ahead of the workloads (processes.
ahead_of_workloads): in a session of their own, at CONTROL_PLANE_NICE, and with that session's
scheduling group at the same nice, since under autogroup scheduling a process's own nice counts
only inside its session."""

from __future__ import annotations

import os
import time
from pathlib import Path

from localcluster.supervisor import CONTROL_PLANE_NICE, ahead_of_workloads


def test_a_process_started_ahead_of_workloads_leads_a_session_whose_group_is_ahead_too() -> None:
    proc = ahead_of_workloads(["sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        # `nice` sets the priority, then execs the command.
        while Path(f"/proc/{proc.pid}/comm").read_text().strip() != "sleep":
            assert time.monotonic() < deadline, "sleep never started"
            time.sleep(0.01)
        assert os.getsid(proc.pid) == proc.pid
        assert os.getsid(proc.pid) != os.getsid(0)
        privileged = os.geteuid() == 0
        expected = CONTROL_PLANE_NICE if privileged else 0
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == expected
        autogroup = Path(f"/proc/{proc.pid}/autogroup")
        if autogroup.exists():  # kernels built with CONFIG_SCHED_AUTOGROUP
            assert autogroup.read_text().split()[-1] == str(expected)
            # The caller's own session is left as it was.
            assert Path("/proc/self/autogroup").read_text() != autogroup.read_text()
    finally:
        proc.kill()
        proc.wait()
