"""The node runner: registers its Node, keeps it Ready (Lease + status heartbeats; node.py), watches
the pods bound to it and runs each with a PodWorker."""

from __future__ import annotations

import base64
import contextlib
import logging
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from .. import podrefs
from . import admission, oci, procs, router
from .adaptations import Context, load_model_table
from .ipam import IPAM
from .node import FIELD_MANAGER, Config, NodeRegistration
from .podenv import base_env, decode_secret
from .pods import PodWorker
from .podstate import Hooks

log = logging.getLogger("noderunner")

REPO = Path(__file__).resolve().parents[3]
TINY_MODEL_NAMES = ("llmfleet-test/tiny-llama", "/models/tiny-llama")


def tiny_model(python: Path) -> str:
    """The tiny test model's directory (made once by dev/dataplane/tiny_model.py)."""
    script = REPO / "dev" / "dataplane" / "tiny_model.py"
    out = subprocess.run([str(python), str(script)], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def _unless_missing(read: Callable[[str, str], Any], ns: str, name: str) -> Any | None:
    """`read(name, ns)`, or None where the object does not exist (yet)."""
    try:
        return read(name, ns)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


class Runner(NodeRegistration):
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.api = config.new_client_from_config(config_file=str(cfg.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.coord = client.CoordinationV1Api(self.api)
        self.ipam = IPAM(cfg.pod_network)
        self.id = procs.runner_id(cfg.node, cfg.state_dir)
        self.workers: dict[str, PodWorker] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        # On real GPUs the model table names real shapes' folders (dev/gpulab); no tiny model.
        tiny = {} if cfg.real_gpus else dict.fromkeys(TINY_MODEL_NAMES, tiny_model(cfg.python))
        self.base_models = tiny | cfg.models
        self.hooks = Hooks(
            context=self._context,
            read_secret_key=self._secret_key,
            read_configmap_key=self._configmap_key,
            read_configmap=self._configmap,
            read_secret=self._secret,
            patch_status=self._patch_status,
            delete_pod=self._delete_pod,
            log_dir=cfg.state_dir / "pods",
            node=cfg.node,
            runner_id=procs.runner_id(cfg.node, cfg.state_dir),
            base_env=base_env(cfg.python),
            state_dir=cfg.state_dir,
            lookup=podrefs.api_lookup(self.core),
            post_event=self._post_event,
            containers=oci.Node(
                state_dir=cfg.state_dir,
                apiserver_port=urllib.parse.urlsplit(self.api.configuration.host).port or 443,
                pod_token=lambda pod, seconds, audience: router.bound_token(
                    self.core, pod, seconds, audience
                ),
            ),
            gpus=cfg.real_gpus,
        )

    # --- hooks for pod workers ----------------------------------------------------------------

    def _context(self, pod_ip: str) -> Context:
        models = load_model_table(self.cfg.model_table_file, extra=None)
        return Context(
            python=self.cfg.python,
            pod_ip=pod_ip,
            models=self.base_models | models,
            real_gpus=self.cfg.real_gpus is not None,
        )

    def _secret(self, ns: str, name: str) -> dict[str, str] | None:
        secret = _unless_missing(self.core.read_namespaced_secret, ns, name)
        if secret is None:
            return None
        return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}

    def _secret_key(self, ns: str, name: str, key: str) -> str | None:
        secret = _unless_missing(self.core.read_namespaced_secret, ns, name)
        return None if secret is None else decode_secret(secret.data, key)

    def _configmap_key(self, ns: str, name: str, key: str) -> str | None:
        data = self._configmap(ns, name)
        return None if data is None else data.get(key)

    def _configmap(self, ns: str, name: str) -> dict[str, str] | None:
        cm = _unless_missing(self.core.read_namespaced_config_map, ns, name)
        return None if cm is None else {str(k): str(v) for k, v in (cm.data or {}).items()}

    def _post_event(self, event: dict[str, Any]) -> None:
        self.core.create_namespaced_event(
            event["metadata"]["namespace"], event, _request_timeout=10
        )

    def _patch_status(self, ns: str, name: str, status: dict[str, Any]) -> None:
        try:
            self.core.patch_namespaced_pod_status(
                name, ns, {"status": status}, field_manager=FIELD_MANAGER, _request_timeout=10
            )
        except ApiException as e:
            if e.status != 404:
                raise

    def _delete_pod(self, ns: str, name: str, uid: str) -> None:
        body = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)
        )
        try:
            self.core.delete_namespaced_pod(name, ns, body=body, _request_timeout=10)
        except ApiException as e:
            if e.status not in (404, 409):
                raise

    # --- pods -------------------------------------------------------------------------------

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        with self.lock:
            worker = self.workers.get(uid)
            if kind == "DELETED":
                if worker is not None:
                    worker.mark_gone()
                return
            if worker is not None:
                worker.update(pod)
                return
            if meta.get("deletionTimestamp"):
                # Being deleted and nothing of it runs here (refused, or left from before the
                # runner restarted): a kubelet confirms such a deletion at once. Left alone, it
                # stayed Terminating for ever and a Deployment's roll never ended.
                self._delete_pod(meta["namespace"], meta["name"], uid)
                return
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            refused = admission.refusal(pod, self.cfg.node)
            if refused is not None:
                self._refuse(pod, refused)
                return
            is_router = router.is_router_pod(pod)  # the vLLM Router: runs without a GPU
            ip = self.ipam.allocate(uid, prefer=(pod.get("status") or {}).get("podIP"))
            if is_router:
                pod = router.prepare(pod, ip, self.core, self.cfg.kubeconfig, self.cfg.state_dir)
            worker = PodWorker(pod, ip, self.hooks)
            worker.update(pod)
            self.workers[uid] = worker
            worker.start()
            log.info("pod %s/%s: admitted with IP %s", meta["namespace"], meta["name"], ip)

    def _refuse(self, pod: dict[str, Any], refused: admission.Refusal) -> None:
        meta = pod["metadata"]
        if (pod.get("status") or {}).get("containerStatuses") == refused.status.get(
            "containerStatuses"
        ) and refused.status["phase"] == "Pending":
            return  # already says so: every relist would rewrite it
        log.info("pod %s/%s: %s", meta["namespace"], meta["name"], refused.log)
        with contextlib.suppress(Exception):
            self._patch_status(meta["namespace"], meta["name"], refused.status)

    def _reap(self) -> None:
        with self.lock:
            for uid, w in list(self.workers.items()):
                if not w.is_alive() and not w.terminal:
                    del self.workers[uid]
                    self.ipam.release(uid)
                    router.cleanup(self.cfg.state_dir, uid)

    def _watch_pods(self) -> None:
        selector = f"spec.nodeName={self.cfg.node}"
        while not self.stop.is_set():
            try:
                listed = self.core.list_pod_for_all_namespaces(field_selector=selector)
                present = set()
                for pod in listed.items:
                    d = self.api.sanitize_for_serialization(pod)
                    present.add(d["metadata"]["uid"])
                    self._on_pod("ADDED", d)
                with self.lock:
                    for uid, w in self.workers.items():
                        if uid not in present:
                            w.mark_gone()
                rv = listed.metadata.resource_version
                while not self.stop.is_set():
                    stream = watch.Watch().stream(
                        self.core.list_pod_for_all_namespaces,
                        field_selector=selector,
                        resource_version=rv,
                        timeout_seconds=30,
                        allow_watch_bookmarks=True,
                    )
                    for event in stream:
                        obj = event["object"]
                        if event["type"] == "BOOKMARK":
                            rv = obj.metadata.resource_version if hasattr(obj, "metadata") else rv
                            continue
                        if event["type"] == "ERROR":
                            raise ApiException(status=410, reason="watch expired")
                        d = self.api.sanitize_for_serialization(obj)
                        rv = d["metadata"]["resourceVersion"]
                        self._on_pod(event["type"], d)
                        if self.stop.is_set():
                            break
                    self._reap()
            except Exception as e:
                if self.stop.is_set():
                    return
                log.warning("pod watch: %s; listing again", e)
                self.stop.wait(1)

    # --- lifecycle --------------------------------------------------------------------------

    def run(self) -> None:
        procs.kill_all(procs.marker(self.id))  # leftovers of a killed runner
        self.register()
        threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True).start()
        threading.Thread(target=self._watch_pods, name="pod-watch", daemon=True).start()
        self.stop.wait()
        self.shutdown()

    def shutdown(self) -> None:
        """Stop every pod process (SIGTERM, then SIGKILL) and unregister the node when the API
        server is still there."""
        log.info("stopping: %d pods", len(self.workers))
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            w.stop_for_shutdown()
        deadline = time.monotonic() + 6
        for w in workers:
            w.join(max(0.0, deadline - time.monotonic()))
        procs.kill_all(procs.marker(self.id))
        with contextlib.suppress(Exception):
            self.core.delete_node(self.cfg.node, _request_timeout=2)
        log.info("stopped")
