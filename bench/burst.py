"""A burst, end to end: llm-d's published autoscaling benchmark's load (Qwen3-32B on H100s,
15 -> 2 -> 10 -> 15 -> 5 -> 2 requests/s over 900 s) replayed on the local cluster through the
vLLM Router, the HPA (Prometheus -> prometheus-adapter, production's scrape interval and HPA
sync) and the operator, with engine stand-ins whose start and speed follow the planner's
prediction for Qwen3-32B on one H100 80GB (bench/burst_profile.py). A replay on the CPU lab, not
a GPU measurement.

Three configurations, one after another, each from one Ready replica:

* `cold`: every new pod compiles afresh (spec.engine.compileCache disabled): the planner's cold
  phases, the weights on the model cache;
* `warm`: the compile cache on the model cache claim, as the product keeps it by default when
  spec.model.cache is set (docs/autoscaling.md, "Compile cache kept across pods"): the warm
  phases. The default configuration: its figures carry no suffix;
* `standby`: `warm` plus one standby replica (spec.autoscaling.standby.replicas 1), asleep
  before the load.

Figures: `burst_p99_ttft_s`, `burst_failed_requests`, `burst_gpu_seconds` (`warm`), the same
suffixed `_cold` and `_standby`, and the mean start of the pods the HPA added
(`burst_pod_start_s`); bench/plots/burst.png (GPUs held, queue, TTFT over time) from
bench/data/burst.json.

`python -m bench.burst` runs it without recording figures; BURST_SEGMENT_S shortens every
segment (development runs only: `make bench` refuses it), BURST_CONFIGS picks configurations.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from dashboards.promql import VLLM_WAITING
from kubernetes import client
from kubernetes import config as k8s_config
from localcluster.metricsstack import MetricsStack
from localcluster.metricsstack.load import (
    delete_llmd,
    exactly_free_gpus,
    pod_ready,
    tiny_llmd,
    wait_free_gpus,
    wait_until,
)
from localcluster.metricsstack.sampling import Sampling
from localcluster.metricsstack.zero import router_ip
from localcluster.noderunner import adaptations
from localcluster.operator_process import Operator
from localcluster.routerapi import routed_engines
from localcluster.supervisor import UPSTREAM_HPA_SYNC_PERIOD, Cluster

from . import burst_plot
from . import burst_profile as bp
from .autoscaling import shipped_engine_scrape_interval
from .burst_load import Record, replay

CONFIGS = ("cold", "warm", "standby")
DEFAULT_CONFIG = "warm"
NAME = "burst"
MODEL = "burst"  # the served model name clients ask for
ENGINES = f"llmfleet.dev/deployment={NAME},app.kubernetes.io/component=engine"  # standby too
TIMEOUT_S = 300.0  # the client's: a request without its last token by then failed
SAMPLE_S = 2.0
TTFT_BIN_S = 10.0  # the plot's TTFT: P99 of the requests sent in each bin
# Requests the router hop holds until the engines have room (late binding): the rest of the queue.
HELD = "llmfleet_router_hop_requests_held"
# Level-1 sleep and wake of the 72B fp8 engine on one H200 (73 GB of weights offloaded, the
# nearest measured to Qwen3-32B's 66 GB in bf16; docs/autoscaling.md, "Standby engines").
SLEEP_S = 57.0
WAKE_S = 1.9
DATA = Path(__file__).resolve().parent / "data" / "burst.json"


@dataclass
class Sampler:
    """GPUs held by the LLMDeployment's engine pods (bound, not yet stopped: a draining pod still
    holds its GPU) and Ready engines, every SAMPLE_S; when each pod was created and Ready."""

    core: client.CoreV1Api
    namespace: str
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    pods: dict[str, dict[str, float]] = field(default_factory=dict)
    _sampling: Sampling | None = None

    def sample(self) -> None:
        items = self.core.list_namespaced_pod(self.namespace, label_selector=ENGINES).items
        held = sum(
            1 for p in items if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed")
        )
        ready = sum(1 for p in items if pod_ready(p) and not p.metadata.deletion_timestamp)
        self.samples.append((time.time(), held, ready))
        for p in items:
            seen = self.pods.setdefault(
                p.metadata.name, {"created": p.metadata.creation_timestamp.timestamp()}
            )
            for c in p.status.conditions or []:
                if c.type == "Ready" and c.status == "True" and "ready" not in seen:
                    seen["ready"] = c.last_transition_time.timestamp()

    def __enter__(self) -> Sampler:
        self._sampling = Sampling(self.sample, SAMPLE_S, "   sample failed").__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sampling:
            self._sampling.__exit__(None, None, None)


def llmd(config: str, model: bp.EngineModel, max_replicas: int) -> dict[str, Any]:
    standby = {"standby": {"replicas": 1}} if config == "standby" else {}
    body = tiny_llmd(
        NAME,
        max_num_seqs=model.max_num_seqs,
        minReplicas=1,
        maxReplicas=max_replicas,
        targetQueueDepth=model.target_queue_depth,
        **standby,
    )
    spec = body["spec"]
    spec["model"]["servedModelName"] = MODEL
    spec["router"] = {"enabled": True}
    phases = model.cold_phases if config == "cold" else model.warm_phases
    spec["engine"]["podAnnotations"] = {
        adaptations.STAND_IN_ANNOTATION: adaptations.STAND_IN,
        adaptations.STAND_IN_TOKEN_SECONDS: f"{model.token_s:g}",
        adaptations.STAND_IN_START_PHASES: bp.phases_annotation(phases),
        adaptations.STAND_IN_SLEEP_SECONDS: f"{SLEEP_S:g}",
        adaptations.STAND_IN_WAKE_SECONDS: f"{WAKE_S:g}",
    }
    return body


def _ready_to_load(api: client.ApiClient, ns: str, stack: MetricsStack, config: str) -> str:
    """Wait for the starting state (one Ready engine routed, the HPA's metric served, the standby
    engine asleep) and return the router's address."""
    core = client.CoreV1Api(api)
    serving = f"{ENGINES},llmfleet.dev/standby!=true"

    def ready_ips() -> set[str]:
        pods = core.list_namespaced_pod(ns, label_selector=serving).items
        return {p.status.pod_ip for p in pods if pod_ready(p)}

    wait_until(ready_ips, 600, 2, "the first engine Ready")
    rip: str = wait_until(lambda: router_ip(core, ns, NAME), 120, 1, "the router Ready")
    wait_until(lambda: ready_ips() <= routed_engines(rip), 60, 1, "the router routing")
    wait_until(lambda: stack.custom_metric(ns), 120, 2, "the HPA's metric served")
    if config == "standby":

        def asleep() -> bool:
            got = client.CustomObjectsApi(api).get_namespaced_custom_object(
                "llmfleet.dev", "v1alpha1", ns, "llmdeployments", NAME
            )
            return (got.get("status") or {}).get("standby") == {"asleep": 1, "awake": 0}

        wait_until(asleep, 600, 2, "the standby engine asleep")
    return rip


def run_config(
    cluster: Cluster,
    api: client.ApiClient,
    stack: MetricsStack,
    node: str,
    config: str,
    *,
    model: bp.EngineModel,
    segments: tuple[bp.Segment, ...],
    max_replicas: int,
    node_gpus: int,
    work: Path,
) -> dict[str, Any]:
    core = client.CoreV1Api(api)
    ns = f"bench-burst-{config}-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        exactly_free_gpus(core, ns, node, node_gpus)
        body = llmd(config, model, max_replicas)
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(body))
        rip = _ready_to_load(api, ns, stack, config)
        schedule = bp.arrivals(segments)
        print(
            f"   {config}: {len(schedule)} requests over {sum(s.seconds for s in segments):.0f} s"
        )
        with Sampler(core, ns) as sampler:
            t0 = time.time()
            records = replay(
                f"http://{rip}:8000/v1",
                MODEL,
                schedule,
                max_tokens=model.output_tokens,
                timeout_s=TIMEOUT_S,
                out=work / f"{config}.jsonl",
            )
            end = time.time()
        queue = stack.query_range(f'sum({VLLM_WAITING}{{namespace="{ns}"}})', t0, end, step=5)
        held = stack.query_range(f'sum({HELD}{{namespace="{ns}"}})', t0, end, step=5)
        delete_llmd(api, ns, NAME, timeout=600)
    finally:
        core.delete_namespace(ns)
    return summarize(
        config,
        t0,
        segments=segments,
        records=records,
        sampler=sampler,
        queue=queue,
        held=held,
    )


def summarize(
    config: str,
    t0: float,
    *,
    segments: tuple[bp.Segment, ...],
    records: list[Record],
    sampler: Sampler,
    queue: list[dict[str, Any]],
    held: list[dict[str, Any]],
) -> dict[str, Any]:
    length = sum(s.seconds for s in segments)
    outcomes = [bp.Outcome(r.sent, r.ttft_s, r.ok) for r in records]
    timeline = [(t - t0, held) for t, held, _ in sampler.samples]
    starts = [
        p["ready"] - p["created"]
        for p in sampler.pods.values()
        if p["created"] >= t0 and "ready" in p
    ]
    errors: dict[str, int] = {}
    for r in records:
        if not r.ok:
            kind = r.error.split(":", 1)[0]
            errors[kind] = errors.get(kind, 0) + 1
    summary = {
        "config": config,
        "segment_s": segments[0].seconds,
        "requests": len(records),
        "p99_ttft_s": bp.p99_ttft(outcomes, TIMEOUT_S),
        "failed_requests": bp.failed(outcomes),
        "gpu_seconds": bp.gpu_seconds(timeline, 0.0, length),
        "pod_start_s": sum(starts) / len(starts) if starts else 0.0,
        "pods_added": len(starts),
        "max_gpus": max(h for _, h in timeline),
        "errors": errors,
        "timeline": [[round(t - t0, 1), held, ready] for t, held, ready in sampler.samples],
        "queue": [[round(float(t) - t0, 1), float(v)] for s in queue[:1] for t, v in s["values"]],
        "held": [[round(float(t) - t0, 1), float(v)] for s in held[:1] for t, v in s["values"]],
        "ttft": [[t, round(p99, 2), n] for t, p99, n in bp.binned(outcomes, TTFT_BIN_S, TIMEOUT_S)],
    }
    print(
        f"   {config}: p99 TTFT {summary['p99_ttft_s']:.1f} s, {summary['failed_requests']} "
        f"failed of {len(records)} {errors}, {summary['gpu_seconds']:.0f} GPU-s, "
        f"{len(starts)} pods added, mean start {summary['pod_start_s']:.0f} s"
    )
    return summary


def figures(summaries: dict[str, dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for config, s in summaries.items():
        suffix = "" if config == DEFAULT_CONFIG else f"_{config}"
        out[f"burst_p99_ttft_s{suffix}"] = s["p99_ttft_s"]
        out[f"burst_failed_requests{suffix}"] = s["failed_requests"]
        out[f"burst_gpu_seconds{suffix}"] = s["gpu_seconds"]
        out[f"burst_pod_start_s{suffix}"] = s["pod_start_s"]
    return out


def measure(segment_s: float, configs: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    segments = bp.profile(segment_s)
    model = bp.engine_model(bp.planned())
    max_replicas = bp.replicas_for_peak(model, segments)
    node_gpus = max_replicas + 1  # the standby configuration's sleeping engine holds one more
    print(f"   engine: {model}; maxReplicas {max_replicas}")
    cluster = Cluster()
    cluster.ensure_up()
    api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    was_running = cluster.alive("node-runner")
    node = cluster.start_node_runner(gpus=node_gpus)
    stack = MetricsStack(cluster).start()
    op = Operator(cluster)
    op.install_identity()
    op.start()
    work = Path(tempfile.mkdtemp(prefix="bench-burst-"))
    summaries: dict[str, dict[str, Any]] = {}
    try:
        with (
            stack.engines_scraped_every(shipped_engine_scrape_interval()),
            cluster.hpa_sync_period(UPSTREAM_HPA_SYNC_PERIOD),
        ):
            for config in configs:
                wait_free_gpus(client.CoreV1Api(api), node, node_gpus, timeout=600)
                summaries[config] = summary = run_config(
                    cluster,
                    api,
                    stack,
                    node,
                    config,
                    model=model,
                    segments=segments,
                    max_replicas=max_replicas,
                    node_gpus=node_gpus,
                    work=work,
                )
                # Kept as each ends: a later configuration's failure leaves the earlier ones.
                (work / f"{config}.summary.json").write_text(json.dumps(summary) + "\n")
    finally:
        op.kill()
        if not was_running:
            wait_free_gpus(client.CoreV1Api(api), node, node_gpus, timeout=600)
            cluster.stop_node_runner()
    print(f"   raw records under {work}")
    return summaries


def _configs() -> tuple[str, ...]:
    chosen = tuple(c for c in os.environ.get("BURST_CONFIGS", ",".join(CONFIGS)).split(",") if c)
    unknown = set(chosen) - set(CONFIGS)
    if unknown or not chosen:
        raise SystemExit(f"BURST_CONFIGS={','.join(chosen)!r}: choose among {', '.join(CONFIGS)}")
    return chosen


def _segment_s() -> float:
    text = os.environ.get("BURST_SEGMENT_S", "")
    try:
        return float(text) if text else bp.PUBLISHED_SEGMENT_S
    except ValueError:
        raise SystemExit(f"BURST_SEGMENT_S={text!r}: a number of seconds") from None


def run() -> dict[str, float]:
    """`make bench BENCH=burst`: the published profile and every configuration."""
    if _segment_s() != bp.PUBLISHED_SEGMENT_S or _configs() != CONFIGS:
        raise SystemExit(
            "make bench BENCH=burst records the published profile with every configuration: "
            "unset BURST_SEGMENT_S and BURST_CONFIGS (python -m bench.burst runs a shorter one)"
        )
    summaries = measure(bp.PUBLISHED_SEGMENT_S, CONFIGS)
    DATA.write_text(json.dumps(summaries, separators=(",", ":")) + "\n")
    burst_plot.plot(summaries)
    return figures(summaries)


def main() -> int:
    """A development run: any profile length and configurations; nothing recorded."""
    segment_s = _segment_s()
    summaries = measure(segment_s, _configs())
    out = Path(tempfile.mkdtemp(prefix="bench-burst-plot-"))
    burst_plot.plot(summaries, out / "burst.png", shortened=segment_s != bp.PUBLISHED_SEGMENT_S)
    (out / "burst.json").write_text(json.dumps(summaries) + "\n")
    print(json.dumps(figures(summaries), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
