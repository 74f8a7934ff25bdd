"""One idempotent, level-based reconcile of an LLMDeployment: plan, render, apply what changed,
prune what is no longer rendered, then write status once (and only when it changed)."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from llmfleet import metrics as m
from llmfleet import metrics_reconcile
from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES, GpuProfiles
from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.deployment import KIND
from llmfleet.models.status import LLMDeploymentStatus
from llmfleet.planner import Plan, PlanError, plan
from llmfleet.planner.engine_args import EXTRA_ARGS_FIELD, weakening_args
from llmfleet.reconcile.machinery.apply import ApplyResult, ref
from llmfleet.reconcile.machinery.base import Reconciler, generation
from llmfleet.reconcile.machinery.cache import ChildView
from llmfleet.reconcile.machinery.conditions import find
from llmfleet.reconcile.machinery.modelconfig import ModelConfigs
from llmfleet.reconcile.machinery.references import deployment_references
from llmfleet.reconcile.machinery.secrets import SecretUnreadableError, read_token
from llmfleet.render import FleetDefaults, Owner, render_fleet
from llmfleet.render.compilecache import compile_cache_location
from llmfleet.render.fetcher import runs_fetcher
from llmfleet.render.leaderworkerset import ENGINE_KINDS, LWS_API_VERSION, LWS_KIND
from llmfleet.render.names import (
    ADAPTERS_GATE,
    DEPLOYMENT_LABEL,
    ENGINE_CONTAINER,
    HTTP_PORT,
    PROGRESS_GATE,
    engine_deployment_name,
)
from llmfleet.render.network_policy import admits_every_source
from llmfleet.render.scaledobject import KEDA_API_VERSION, SCALED_OBJECT_KIND, keda_hpa_name

from . import reasons as r
from . import standbyloop
from .adapter_marks import current_marks, marks_to_write, serving, withdrawn, write_marks
from .adapter_status import AdapterReport, adapter_report, key_unreadable, newly_keyless
from .adapters import AdapterSync, Wanted, gates_to_open, lora_engines
from .fetcher_token import FetcherTokens, KeySecret
from .full_pool_roll import full_pool_roll, roll_waits, without
from .kvcache import EngineKVCache, reporting_engines
from .plan_verified import newly_unverified
from .rollout import held, is_router, previous_engines
from .stall import stall_window
from .stallwatch import StallReport, StallWatch, opened, restart, turn_gates
from .status import Observed, invalid_status, newly_announced, ready_status


class Controller(Reconciler[LLMDeploymentSpec, LLMDeploymentStatus]):
    kind = KIND
    spec_model = LLMDeploymentSpec
    status_model = LLMDeploymentStatus

    def __init__(
        self,
        api: k8s.ApiClient,
        fleet: FleetDefaults,
        profiles: GpuProfiles = DEFAULT_GPU_PROFILES,
        view: ChildView | None = None,
        *,
        model_configs: ModelConfigs | None = None,
        fetcher_key: KeySecret | None = None,
    ) -> None:
        super().__init__(api, profiles, view, model_configs)
        self.fleet = fleet
        self.kv_cache = EngineKVCache(HTTP_PORT)
        self.adapters = AdapterSync(HTTP_PORT)
        self.stalls = StallWatch(HTTP_PORT)
        self.standby = standbyloop.StandbyWatch(HTTP_PORT)
        # None: a key of this process's own (one replica outside a cluster, tests).
        self.fetcher_tokens = FetcherTokens(k8s.CoreV1Api(api), fetcher_key)

    def plan(self, spec: LLMDeploymentSpec, namespace: str) -> Plan:
        planned = plan(spec, self.profiles, self.model_configs.for_model(spec.model, namespace))
        if planned.pipeline_parallel_size > 1 and not self.view.serves(LWS_API_VERSION, LWS_KIND):
            # Checked again on every resync: installing LeaderWorkerSet later is enough.
            raise PlanError(
                "spec.gpus",
                f"{planned.reason} A replica over several nodes runs as a LeaderWorkerSet "
                f"({LWS_API_VERSION}), which this cluster does not serve: install "
                "LeaderWorkerSet (sigs.k8s.io/lws; see the chart's README), or give the model "
                "GPUs that one node holds (spec.gpus).",
                reason=r.LWS_MISSING,
            )
        if spec.autoscaling.scales_to_zero:
            self._check_scale_to_zero()
        policy = self.fleet.network_policy
        if policy and planned.lora and admits_every_source(spec, planned, policy):
            raise PlanError(
                "spec.router.enabled",
                "false: the engines are the endpoint, and their port also serves vLLM's runtime "
                "LoRA endpoints, which the NetworkPolicy cannot tell apart; with no clients "
                "named it would admit every pod to them. Enable the router "
                "(spec.router.enabled: true), or name the pods that may call the engines in the "
                "chart value engine.networkPolicy.clients",
                reason=r.LORA_ENDPOINTS_UNFENCED,
            )
        return planned

    def _check_scale_to_zero(self) -> None:
        field = "spec.autoscaling.minReplicas"
        if not self.view.serves(KEDA_API_VERSION, SCALED_OBJECT_KIND):
            # Checked again on every resync: installing KEDA later is enough.
            raise PlanError(
                field,
                "0 scales the engines to zero through KEDA, whose ScaledObject API "
                f"({KEDA_API_VERSION}) this cluster does not serve: install KEDA 2.16 or later "
                "(helm install keda kedacore/keda --namespace keda --create-namespace; see the "
                "chart's README), or set minReplicas to at least 1",
                reason=r.KEDA_MISSING,
            )
        if not self.fleet.keda_prometheus_url:
            raise PlanError(
                field,
                "0 scales the engines to zero on metrics KEDA reads from Prometheus, and the "
                "operator was given no Prometheus URL: set the chart value "
                "keda.prometheusUrl (the operator's --keda-prometheus-url), or set minReplicas "
                "to at least 1",
                reason=r.KEDA_PROMETHEUS_UNSET,
            )

    def refused_status(
        self, old: LLMDeploymentStatus, generation: int, reason: str, message: str
    ) -> LLMDeploymentStatus:
        return invalid_status(old, generation, reason, message)

    def refused(
        self,
        namespace: str,
        name: str,
        new: LLMDeploymentStatus,
        spec: LLMDeploymentSpec | None,
    ) -> None:
        m.set_planned(namespace, name, None)
        _publish_conditions(namespace, name, new)
        if spec is not None:  # valid, but no layout fits
            m.record_planner_decision(namespace, name, spec, None)

    def forget(self, namespace: str, name: str) -> None:
        m.forget(namespace, name)
        self.kv_cache.forget(namespace, name)
        self.adapters.forget(namespace, name)
        self.stalls.forget(namespace, name)
        self.standby.forget(namespace, name)
        self.fetcher_tokens.forget(namespace, name)

    def run(
        self,
        body: dict[str, Any],
        old_status: LLMDeploymentStatus,
        spec: LLMDeploymentSpec,
        planned: Plan,
    ) -> ApplyResult:
        meta = body["metadata"]
        ns, name = meta["namespace"], meta["name"]
        owner = Owner(name=name, namespace=ns, uid=meta["uid"])
        result = ApplyResult()
        live: dict[str, dict[str, Any]] = {}
        mine = (DEPLOYMENT_LABEL, name)
        children = self.view.by_label("v1", "Pod", ns, *mine)
        running = self.view.get("apps/v1", "Deployment", ns, engine_deployment_name(name, planned))
        roll = full_pool_roll(children, planned, running)
        first, one = len(roll.replace_first), roll.one_at_a_time
        fleet = render_fleet(
            owner, spec, planned, self.fleet, replace_first=first, one_at_a_time=one
        )
        if runs_fetcher(planned):
            # Before the pods that read it: a missing Secret would hold them in
            # CreateContainerConfigError until the next reconcile.
            self.fetcher_tokens.ensure_secret(owner)
        if planned.standby is not None:  # the dev-mode fence's token, likewise
            standbyloop.ensure_token(self.fetcher_tokens, owner)
        for obj in fleet.objects():
            live[ref(obj)] = self.applier.apply(obj, result)

        engine = _applied(live, fleet.engine)
        old_engines = previous_engines(
            (d for kind in ENGINE_KINDS for d in self.view.by_label(*kind, ns, *mine)),
            fleet.engine,
        )
        hold = held(old_engines, engine, planned.min_replicas)
        self.applier.prune(
            namespace=ns,
            owner_label=mine,
            owner_uid=owner.uid,
            keep=live.keys(),
            hold=hold,
            result=result,
        )
        still_old = tuple(d for d in old_engines if ref(d) in hold)

        pods = tuple(p for p in children if not is_router(p))
        blocked = tuple(self.blockers(children, deployment_references(spec, planned)))
        adapters, busy = self._sync_adapters(
            ns, name, spec, planned, pods=pods, generation=generation(body)
        )
        engine_spec = (engine or {}).get("spec") or {}
        # A LeaderWorkerSet's leaders are the engines that serve and report their KV cache.
        template = engine_spec.get("template") or (
            engine_spec.get("leaderWorkerTemplate") or {}
        ).get("leaderTemplate")
        scaled_object = _applied(live, fleet.scaled_object)
        hpa = (
            # KEDA's, which it creates once it has seen the ScaledObject.
            self.view.get(
                "autoscaling/v2",
                "HorizontalPodAutoscaler",
                ns,
                keda_hpa_name(scaled_object["metadata"]["name"]),
            )
            if scaled_object is not None
            else _applied(live, fleet.hpa)
        )
        observed = Observed(
            engine=engine,
            old_engines=still_old,
            hpa=hpa,
            scaled_object=scaled_object,
            pods=pods,
            # Read once per pod (cached by uid): an idle resync dials no engine.
            kv_cache_tokens=self.kv_cache.measure(ns, name, reporting_engines(pods, template)),
            router=_applied(live, fleet.router.deployment if fleet.router else None),
            blockers=blocked,
            roll=roll,
            adapters=adapters,
            stalled=self._check_stalls(body, spec, planned, pods, busy),
            standby=standbyloop.reconcile_standby(
                self.standby,
                k8s.CoreV1Api(self.api),
                self.events.emit,
                body,
                planned.standby,
                pods=pods,
                tokens=self.fetcher_tokens,
            ),
        )
        new = ready_status(
            old=old_status,
            generation=generation(body),
            plan=planned,
            observed=observed,
            endpoint=fleet.endpoint,
            compile_cache=compile_cache_location(spec.model, spec.engine),
        )
        self._announce(body, old_status, spec, planned, result)
        unverified = newly_unverified(old_status, new)
        wrote = self.write_status(body, new)
        if wrote and unverified is not None:
            # Once, when PlanVerified turns False; not on every resync while it stays so.
            self.events.emit(body, "Warning", r.PLAN_NOT_VERIFIED_EVENT, unverified)
        if wrote and (announced := newly_announced(old_status, new)) is not None:
            # Once, when the rollout takes that way; not on every resync while it does.
            self.events.emit(body, "Normal", *announced)
        faults = without(blocked, roll_waits(roll, new.ready_replicas or 0, new.replicas or 0))
        if wrote and faults:
            degraded = find(old_status.conditions, r.DEGRADED)
            self.announce_blockers(body, degraded.message if degraded else "", faults)
        keyless = newly_keyless(old_status.conditions, new.conditions, blocked) if wrote else None
        if keyless is not None:
            self.events.emit(body, "Warning", keyless.reason, keyless.message)
        m.set_planned(ns, name, planned)
        m.record_planner_decision(ns, name, spec, planned)
        _publish_conditions(ns, name, new)
        m.observe_engine_startups(ns, name, observed.pods)
        return result

    def _sync_adapters(
        self,
        ns: str,
        name: str,
        spec: LLMDeploymentSpec,
        planned: Plan,
        *,
        pods: tuple[dict[str, Any], ...],
        generation: int,
    ) -> tuple[AdapterReport | None, frozenset[str]]:
        """Loads spec.adapters into each engine that answers, unloads the rest, marks each pod
        with what its engine serves, and opens the readiness gate of each engine that has them;
        None without LoRA. With it, the engines
        a LoRA call was sent to."""
        if planned.lora is None:
            return None, frozenset()
        wanted = tuple(Wanted(a.name, a.source, a.revision) for a in spec.adapters)
        core = k8s.CoreV1Api(self.api)
        ref = spec.engine.api_key_secret_ref
        try:
            # Read on every reconcile, so a changed Secret is sent from the next one.
            key = None if ref is None else read_token(core, ns, ref)
        except SecretUnreadableError as e:
            return key_unreadable(wanted, e, generation), frozenset()
        engines = lora_engines(pods, ENGINE_CONTAINER)
        fetcher = self.fetcher_tokens.token(ns, name)
        # The pods' adapters marks name what is about to be unloaded no more, then what loaded.
        marks = current_marks(pods)
        early = withdrawn(marks, self.adapters.staying(ns, name, wanted, engines))
        write_marks(core, ns, early)
        outcomes = self.adapters.sync(ns, name, wanted, engines, key, fetcher_token=fetcher)
        write_marks(core, ns, marks_to_write(marks | early, serving(outcomes)))
        for pod in gates_to_open(pods, outcomes):
            gate = {"type": ADAPTERS_GATE, "status": "True", "reason": "AdaptersLoaded"}
            try:
                core.patch_namespaced_pod_status(pod, ns, {"status": {"conditions": [gate]}})
                metrics_reconcile.count_write("patch", "Pod/status")
            except ApiException as e:
                if e.status != 404:  # a pod that is gone needs no gate
                    raise
        busy = frozenset(o.pod for o in outcomes if o.called)
        return adapter_report(wanted, outcomes, generation), busy

    def _check_stalls(
        self,
        body: dict[str, Any],
        spec: LLMDeploymentSpec,
        planned: Plan,
        pods: tuple[dict[str, Any], ...],
        busy: frozenset[str],
    ) -> str:
        """Takes stalled engines out of service and restarts those stalled a second window;
        Degraded's message naming them ("" when none)."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        setting = spec.engine.stall_detection
        if setting is None or not setting.enabled:
            self.stalls.forget(ns, name)
            # Pods of a rollout that turned it off still carry the gate until replaced.
            report = StallReport(window=0, gates=opened(pods))
        else:
            report = self.stalls.check(ns, name, pods, stall_window(setting, planned), busy)
        core = k8s.CoreV1Api(self.api)
        turn_gates(core, ns, report)
        window = f"{report.window:.0f} s"
        for pod in report.newly_stalled:
            self.events.emit(
                body,
                "Warning",
                r.ENGINE_STALLED_EVENT,
                f"engine pod {pod} has requests running and counted no token for {window}: out of "
                f"service (readiness gate {PROGRESS_GATE} False) until it does, restarted if it "
                f"does not within {window}",
            )
        if report.newly_stalled:
            m.count_engine_stalls(ns, name, len(report.newly_stalled))
        for pod in report.restart:
            restart(core, ns, pod)
            self.events.emit(
                body,
                "Warning",
                r.ENGINE_RESTARTED_EVENT,
                f"engine pod {pod} counted no token for another {window} out of service: deleted",
            )
        return report.degraded()

    def _announce(
        self,
        body: dict[str, Any],
        old_status: LLMDeploymentStatus,
        spec: LLMDeploymentSpec,
        planned: Plan,
        result: ApplyResult,
    ) -> None:
        if old_status.plan != planned.summary():
            self.events.emit(body, "Normal", r.PLANNED_EVENT, planned.reason)
        weakened = weakening_args(spec.engine.extra_args)
        if weakened and old_status.observed_generation != generation(body):
            # Once per spec: allowed, but whoever runs the cluster should know.
            self.events.emit(
                body,
                "Warning",
                r.ENDPOINT_WEAKENED_EVENT,
                f"{EXTRA_ARGS_FIELD}: " + "; ".join(weakened),
            )
        if result.writes:
            parts = [
                f"{verb} {', '.join(items)}"
                for verb, items in (
                    ("created", result.created),
                    ("updated", result.updated),
                    ("deleted", result.deleted),
                )
                if items
            ]
            self.events.emit(body, "Normal", r.APPLIED_EVENT, "; ".join(parts))


def _publish_conditions(namespace: str, name: str, status: LLMDeploymentStatus) -> None:
    m.set_conditions(namespace, name, (c.model_dump(by_alias=True) for c in status.conditions))


def _applied(
    live: dict[str, dict[str, Any]], rendered: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The object the API server holds for `rendered`, as this reconcile applied it."""
    return None if rendered is None else live.get(ref(rendered))
