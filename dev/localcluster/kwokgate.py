"""`python -m localcluster.kwokgate --kubeconfig K`: the kubelet's refusals for kwok's nodes.

kwok starts every pod bound to its nodes at once: a pod whose Secret does not exist, or whose
image no registry has, would go Running, where a kubelet holds it in CreateContainerConfigError
or ErrImagePull. This process stands where the kubelet's checks would: it watches the pods bound to
kwok's nodes and, for each not yet admitted, checks what the pod references (podrefs.py) and
pulls its images from what the nodes hold (imagepull.py), and whether the runtime could start each
container's command (containerstart.py). A pod that passes gets the annotation
ADMITTED, the only pods kwok's pod-ready Stage starts (`gated_stages` adds that selector to the
Stage the cluster runs kwok with). A pod that does not gets the kubelet's waiting status and
Events, and is checked again every RETRY_SECONDS until the object exists (an image is pulled
again only once its back-off has passed: ImagePullBackOff meanwhile; a container whose command
its image lacks is tried again likewise, CrashLoopBackOff meanwhile, or ends the pod under
restartPolicy Never).

Started by `Cluster.up()` beside kwok (a component: `Cluster.down()` stops it).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from . import containerstart, imagepull, podrefs
from .nodes import KWOK_NODE_PREFIX

log = logging.getLogger("kwokgate")
ADMITTED = "llmfleet.dev/lab-kubelet-admitted"
# kwok's pod-complete Stage ends a Job's pod as Succeeded the moment it runs: a pod with this
# annotation (an LLMBatchJob's spec.engine.podAnnotations) stays Running until deleted instead,
# as a shard with more lines than the run lasts would, and once deleted it ends as the batch
# runner does on SIGTERM (bench/spare_day.py: spare shards that hold kwok GPUs). Not under
# llmfleet.dev/: the CRD refuses that prefix in podAnnotations.
RUNS_UNTIL_DELETED = "lab.llmfleet.test/kwok-runs-until-deleted"
# Phase Failed, exit 143: upstream's pod-delete removes a deleted pod without a terminal phase,
# and the Job controller replaces a pod (podReplacementPolicy Failed, a podFailurePolicy) and
# drops its tracking finalizer only once the pod is terminal.
_STOPPED = """
{{ $now := Now }}
phase: Failed
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 143
      finishedAt: {{ $now | Quote }}
      reason: Error
      startedAt: {{ $now | Quote }}
{{ end }}
"""
RETRY_SECONDS = 2.0
WATCH_SECONDS = 300


def gated_stages(text: str) -> str:
    """kwok's Stages with pod-ready starting only pods that carry ADMITTED, and pod-complete
    (where there is one) sparing pods that carry RUNS_UNTIL_DELETED."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    stages = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "Stage"}
    if "pod-ready" not in stages:
        raise ValueError("kwok's stages have no pod-ready Stage")
    stages["pod-ready"]["spec"]["selector"]["matchExpressions"].append(
        {"key": f'.metadata.annotations["{ADMITTED}"]', "operator": "In", "values": ["true"]}
    )
    if "pod-complete" in stages and "pod-delete" in stages:
        docs += _until_deleted(stages["pod-complete"], stages["pod-delete"])
    return yaml.safe_dump_all(docs, sort_keys=False)


def _until_deleted(complete: dict[str, Any], delete: dict[str, Any]) -> list[dict[str, Any]]:
    """pod-complete and pod-delete sparing RUNS_UNTIL_DELETED pods, and the two Stages that end
    such a pod once deleted: stopped (_STOPPED), then removed."""
    key = f'.metadata.annotations["{RUNS_UNTIL_DELETED}"]'
    for upstream in (complete, delete):
        upstream["spec"]["selector"].setdefault("matchExpressions", []).append(
            {"key": key, "operator": "DoesNotExist"}
        )

    def stage(name: str, phases: list[str], then: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": delete.get("apiVersion", "kwok.x-k8s.io/v1alpha1"),
            "kind": "Stage",
            "metadata": {"name": name},
            "spec": {
                "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                "selector": {
                    "matchExpressions": [
                        {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                        {"key": key, "operator": "Exists"},
                        {"key": ".status.phase", "operator": "In", "values": phases},
                    ]
                },
                "next": then,
            },
        }

    return [
        stage("pod-stop-until-deleted", ["Pending", "Running"], {"statusTemplate": _STOPPED}),
        stage("pod-delete-until-deleted", ["Failed", "Succeeded"], {"delete": True}),
    ]


class Gate:
    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.lookup = podrefs.api_lookup(self.core)
        self.stop = threading.Event()
        self._lock = threading.Lock()
        # uid -> (pod, what was said last): the pods held back, checked again every RETRY_SECONDS.
        self._held: dict[str, tuple[dict[str, Any], podrefs.Refusal]] = {}
        self._pulls: dict[str, imagepull.Puller] = {}  # uid -> its images' pull back-off
        self._starts: dict[str, containerstart.Starter] = {}  # uid -> its crash-loop back-off

    def consider(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        node = str(spec.get("nodeName") or "")
        with self._lock:
            if (
                not node.startswith(KWOK_NODE_PREFIX)
                or meta.get("deletionTimestamp")
                or (meta.get("annotations") or {}).get(ADMITTED) == "true"
                or (pod.get("status") or {}).get("phase") not in (None, "Pending")
            ):
                self._drop(meta["uid"])
                return
            pulls = self._pulls.setdefault(meta["uid"], imagepull.Puller())
            starts = self._starts.setdefault(meta["uid"], containerstart.Starter())
            refusal = podrefs.check(pod, self.lookup, images=pulls.check, start=starts.check)
            if refusal is None:
                self._admit(pod)
                self._drop(meta["uid"])
                return
            held = self._held.get(meta["uid"])
            self._held[meta["uid"]] = (pod, refusal)
            if held is not None and held[1] == refusal:
                return
        log.info("%s/%s: %s", meta["namespace"], meta["name"], refusal.event_message)
        self._hold(pod, refusal, node)

    def _admit(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            self.core.patch_namespaced_pod(
                meta["name"], meta["namespace"], {"metadata": {"annotations": {ADMITTED: "true"}}}
            )
        except ApiException as e:
            if e.status != 404:
                raise

    def _hold(self, pod: dict[str, Any], refusal: podrefs.Refusal, node: str) -> None:
        meta = pod["metadata"]
        try:
            # The Events first: whoever the status change wakes finds them (the operator reads a
            # waiting pod's FailedMount Events).
            for said in podrefs.events(pod, refusal, node):
                self.core.create_namespaced_event(meta["namespace"], said)
            self.core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": podrefs.waiting_status(pod, refusal)}
            )
        except ApiException as e:
            if e.status != 404:
                raise

    def _drop(self, uid: str) -> None:
        self._held.pop(uid, None)
        self._pulls.pop(uid, None)
        self._starts.pop(uid, None)

    def forget(self, uid: str) -> None:
        with self._lock:
            self._drop(uid)

    def retry_held(self) -> None:
        while not self.stop.wait(RETRY_SECONDS):
            with self._lock:
                held = [pod for pod, _ in self._held.values()]
            for pod in held:
                try:
                    self.consider(pod)
                except Exception:  # the API server restarting: the next round tries again
                    log.exception("checking %s again failed", pod["metadata"]["name"])

    def watch_pods(self) -> None:
        api = self.core.api_client
        while not self.stop.is_set():
            try:
                listed = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
                for item in listed.items:
                    self.consider(api.sanitize_for_serialization(item))
                stream = watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector="spec.nodeName!=",
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=WATCH_SECONDS,
                )
                for event in stream:
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.consider(event["raw_object"])
                    elif event["type"] == "DELETED":
                        self.forget(event["raw_object"]["metadata"]["uid"])
                    if self.stop.is_set():
                        return
            except Exception as e:  # watch expired (410) or the API server restarts: list again
                log.info("pod watch ended (%s); listing again", e)
                self.stop.wait(1.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="localcluster.kwokgate", description=__doc__)
    p.add_argument("--kubeconfig", type=Path, required=True)
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    gate = Gate(config.new_client_from_config(config_file=str(args.kubeconfig)))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        gate.stop.set()
        raise SystemExit(0)  # out of the watch's blocking read

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=gate.retry_held, name="retry", daemon=True).start()
    gate.watch_pods()
    return 0


if __name__ == "__main__":
    sys.exit(main())
