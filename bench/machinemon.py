"""What the machine itself did during a benchmark run: CPU time stolen by the hypervisor, pressure
stall information, the processes that took the CPU, and how late this sampler woke up.

Some reaction runs stalled as a whole: the API server, the HPA loop and Prometheus, which run
ahead of the workloads, went silent together for 15-30 s. A sampler that records steal time and
its own lateness tells a stall of the whole virtual machine (the sampler is late too, or steal
is high) from starvation inside it (the sampler is on time and a process of ours took the CPU).

Run as `python -m bench.machinemon OUT.jsonl` (one JSON object per sample, every 0.5 s) at the
control plane's priority; `summary(OUT, start, end)` reads it back.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

INTERVAL = 0.5
TOP = 6
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal.
STEAL = 7


def _cpu() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def _pressure() -> dict[str, int]:
    """Microseconds some (and full) tasks stalled on cpu, io, memory since boot."""
    out: dict[str, int] = {}
    for res in ("cpu", "io", "memory"):
        try:
            text = Path(f"/proc/pressure/{res}").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            kind, *fields = line.split()
            out[f"{res}_{kind}"] = int(dict(f.split("=") for f in fields)["total"])
    return out


def _processes() -> dict[int, tuple[str, str, int]]:
    """pid -> (comm, state, utime + stime in ticks)."""
    procs: dict[int, tuple[str, str, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        rest = stat[stat.rindex(")") + 2 :].split()
        procs[int(entry.name)] = (comm, rest[0], int(rest[11]) + int(rest[12]))
    return procs


def sample_forever(out: Path) -> None:
    before = _processes()
    with out.open("a") as f:
        while True:
            time.sleep(INTERVAL)
            now = _processes()
            busy = sorted(
                (
                    (ticks - before[pid][2], comm, pid)
                    for pid, (comm, _, ticks) in now.items()
                    if pid in before and ticks > before[pid][2]
                ),
                reverse=True,
            )[:TOP]
            record: dict[str, Any] = {
                "t": time.time(),
                "mono": time.monotonic(),
                "cpu": _cpu(),
                "psi": _pressure(),
                "top": [[comm, pid, d] for d, comm, pid in busy],
                "blocked": sorted({comm for comm, state, _ in now.values() if state == "D"}),
            }
            f.write(json.dumps(record) + "\n")
            f.flush()
            before = now


def summary(path: Path, start: float, end: float) -> dict[str, Any]:
    """The sampler's longest gap, the worst steal and pressure over 2 s, and the intervals that
    look like stalls, between `start` and `end` (epoch seconds)."""
    samples = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    samples = [s for s in samples if start - 2 <= s["t"] <= end]
    if len(samples) < 5:
        return {"samples": len(samples)}
    gaps, steal, cpu_some, io_full, stalls = [], [], [], [], []
    for a, b in zip(samples, samples[4:], strict=False):  # ~2 s apart
        dt = b["mono"] - a["mono"]
        ticks = [y - x for x, y in zip(a["cpu"], b["cpu"], strict=True)]
        stolen = 100 * ticks[STEAL] / max(sum(ticks), 1)
        psi = {k: (b["psi"].get(k, 0) - a["psi"].get(k, 0)) / (dt * 1e4) for k in b["psi"]}
        steal.append(stolen)
        cpu_some.append(psi.get("cpu_some", 0.0))
        io_full.append(psi.get("io_full", 0.0))
        if stolen > 25 or psi.get("io_full", 0.0) > 25:
            stalls.append(
                {
                    "at": round(a["t"] - start, 1),
                    "steal_pct": round(stolen, 1),
                    "io_full_pct": round(psi.get("io_full", 0.0), 1),
                    "top": b["top"][:3],
                }
            )
    for a, b in itertools.pairwise(samples):
        gaps.append((b["mono"] - a["mono"], a["t"] - start))
    gap, gap_at = max(gaps)
    return {
        "samples": len(samples),
        "sampler_longest_gap_s": round(gap, 2),
        "sampler_longest_gap_at_s": round(gap_at, 1),
        "steal_pct_max_2s": round(max(steal), 1),
        "steal_pct_mean": round(sum(steal) / len(steal), 1),
        "cpu_pressure_some_pct_max_2s": round(max(cpu_some), 1),
        "io_pressure_full_pct_max_2s": round(max(io_full), 1),
        "stalls": stalls[:20],
    }


if __name__ == "__main__":
    sample_forever(Path(sys.argv[1]))
