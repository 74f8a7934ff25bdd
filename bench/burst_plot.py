"""bench/plots/burst.png: the burst replay's three configurations over time (bench/burst.py):
GPUs held by engine pods, requests waiting (in the engines' queues, and held by the router hop
until the engines have room), and the P99 TTFT of the requests sent in each 10 s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import burst_profile as bp
from . import plotting

HERE = Path(__file__).resolve().parent
PLOT = HERE / "plots" / "burst.png"
DATA = HERE / "data" / "burst.json"
COLORS = {"cold": "tab:blue", "warm": "tab:green", "standby": "tab:purple"}


def plot(
    summaries: dict[str, dict[str, Any]],
    path: Path = PLOT,
    *,
    shortened: bool = False,
    stale: frozenset[str] = frozenset(),
) -> None:
    """`stale`: configurations measured on an older tree, labelled so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (gpus, queue, ttft) = plt.subplots(3, 1, figsize=(10, 9), dpi=110, sharex=True)
    for config, s in summaries.items():
        color = COLORS.get(config, "black")
        label = (
            f"{config}: P99 TTFT {s['p99_ttft_s']:.0f} s, {s['failed_requests']} failed, "
            f"{s['gpu_seconds'] / 3600:.1f} GPU-h"
        )
        if config in stale:
            label += f" ({s.get('stale', 'stale')})"
        t = [row[0] for row in s["timeline"]]
        gpus.step(t, [row[1] for row in s["timeline"]], where="post", color=color, label=label)
        if s["queue"]:
            queue.plot(*zip(*s["queue"], strict=True), color=color, label=f"{config}: engines")
        if s.get("held"):
            held = f"{config}: held by the router hop"
            queue.plot(*zip(*s["held"], strict=True), color=color, linestyle="--", label=held)
        bins = s["ttft"]
        ttft.plot([b[0] for b in bins], [b[1] for b in bins], color=color, label=config)
        failed = [b for b in bins if b[2]]
        ttft.scatter([b[0] for b in failed], [b[1] for b in failed], color=color, marker="x", s=12)
    segment = float(next(iter(summaries.values()))["segment_s"])
    for i, rate in enumerate(bp.PUBLISHED_RATES):
        start = i * segment
        for ax in (gpus, queue, ttft):
            ax.axvspan(start, start + segment, color="grey", alpha=0.03 + 0.01 * rate, lw=0)
        gpus.text(
            start + segment / 2,
            0.97,
            f"{rate:g} req/s",
            ha="center",
            va="top",
            transform=gpus.get_xaxis_transform(),
            fontsize=8,
        )
    gpus.set_ylabel("GPUs held by engine pods")
    gpus.legend(fontsize=8, loc="center right")
    queue.set_ylabel("requests waiting (sum)")
    queue.set_yscale("symlog", linthresh=10)
    queue.set_ylim(bottom=0)
    queue.legend(fontsize=8)
    ttft.set_yscale("log")
    ttft.set_ylabel("P99 TTFT of requests sent\nin each 10 s (s; x: some failed)")
    ttft.axhline(bp.THEIR_P99_TTFT_S / 10, color="grey", linestyle=":", linewidth=0.8)
    ttft.set_xlabel("seconds since the load's start")
    ttft.legend(fontsize=8)
    title = (
        "Replay of llm-d's bursty autoscaling profile on the CPU lab with engine stand-ins\n"
        "(start and speed: the planner's Qwen3-32B on one H100); not a GPU measurement"
    )
    if shortened:
        title += "\nSHORTENED PROFILE (BURST_SEGMENT_S): not the published 900 s"
    plotting.save(fig, path, title)


def main() -> int:
    """Redraw the plot from bench/data/burst.json."""
    summaries = json.loads(DATA.read_text())
    plot(summaries, stale=frozenset(c for c, s in summaries.items() if s.get("stale")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
