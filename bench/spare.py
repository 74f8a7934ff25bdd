"""`make bench BENCH=spare`: batch on spare GPUs (issue 33, docs/batch.md "Batch on spare GPUs")
on the local cluster with the real operator process and the real kube-scheduler.

* bench/spare_day.py: a day of online load over the kwok GPU nodes, without and with a Spare
  LLMBatchJob: `spare_idle_gpu_share_without`, `spare_idle_gpu_share_with`; draws
  `plots/spare.png`.
* bench/spare_preempt.py: an online engine preempting a spare shard that runs real vLLM on the
  node runner: `spare_preempt_s` (and its worst, the shard's stop, the engine Ready).

`python -m bench.spare day` or `preempt` runs one half and records nothing (a trial run).
"""

from __future__ import annotations

import sys
from pathlib import Path

from kubernetes import config as k8s_config
from localcluster.operator_process import Operator
from localcluster.supervisor import Cluster

from bench import plotting, spare_day, spare_preempt
from bench.spare_day import HOURS, STEP_S, Sample

PLOT = Path(__file__).resolve().parent / "plots" / "spare.png"


def plot(runs: dict[str, list[Sample]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(10, 4), dpi=110, sharey=True)
    for ax, (arm, samples) in zip(axes, runs.items(), strict=True):
        hours = [s.t / STEP_S for s in samples]
        ax.stackplot(
            hours,
            [s.online for s in samples],
            [s.spare for s in samples],
            [s.idle for s in samples],
            labels=["online engines", "spare shards", "idle"],
            colors=["C0", "C2", "0.85"],
            step="post",
        )
        share = spare_day.idle_share(samples)
        ax.set_title(f"{arm} a spare job: {share:.1%} of GPU-hours idle", fontsize=10)
        ax.set_xlim(0, HOURS)
        ax.set_xticks(range(0, HOURS + 1, 3))
        ax.set_xlabel(f"hour of the day (each {STEP_S:.0f} s)")
    axes[0].set_ylabel("GPUs")
    axes[0].legend(loc="upper left", fontsize=8)
    plotting.save(
        fig,
        PLOT,
        f"A day replayed over {runs['without'][0].total} kwok H100s: GPUs bound by the scheduler, "
        f"sampled every {spare_day.SAMPLE_S:.0f} s",
    )


def run(parts: tuple[str, ...] = ("day", "preempt")) -> dict[str, float]:
    cluster = Cluster()
    cluster.ensure_up()
    api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    op = Operator(cluster)
    op.install_identity()
    op.start()
    figures: dict[str, float] = {}
    try:
        if "day" in parts:
            day, runs = spare_day.measure(api, cluster)
            plot(runs)
            figures |= day
        if "preempt" in parts:
            figures |= spare_preempt.measure(api, cluster)
    finally:
        op.kill()
    return figures


if __name__ == "__main__":
    for k, v in sorted(run(tuple(sys.argv[1:]) or ("day", "preempt")).items()):
        print(f"{k} = {v:.3f}")
