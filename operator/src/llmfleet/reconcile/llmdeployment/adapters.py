"""LoRA adapters in the running engines: the LLMDeployment's `spec.adapters` loaded into, and
removed from, each vLLM engine through vLLM's runtime LoRA API, without restarting a pod.

Why the runtime API (`POST /v1/load_lora_adapter`, `/v1/unload_lora_adapter`; the engines run
with VLLM_ALLOW_RUNTIME_LORA_UPDATING) rather than vLLM's LoRA resolver plugins: a resolver loads
an adapter on the first request that names it, so a broken adapter is found by a user's request
and never by status, and nothing ever unloads one. Here the operator knows, per engine, what is
loaded and what failed and why (docs/lora.md).

What each engine holds is remembered per pod uid and container restart count: a restarted engine
has lost its adapters, so it counts as new. A new engine is asked `/v1/models` once (a new leader
finds what its predecessor loaded), then only told what changed. A failed load is retried after
RETRY_SECONDS, or at once when its source changes.

Behind spec.engine.apiKeySecretRef every call carries the key (vLLM's --api-key guards every /v1
path): the caller reads it once per reconcile and passes it in each Endpoint.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmfleet.fetcher.paths import FETCH_ROOT, fetched_path, needs_fetch
from llmfleet.reconcile.machinery.podcall import call, pod_url
from llmfleet.reconcile.machinery.references import API_KEY_FIELD
from llmfleet.reconcile.machinery.secrets import BearerToken
from llmfleet.render.names import ADAPTERS_GATE

from .fetching import NO_FETCHER, FetcherApi, HttpFetcherApi, has_fetcher

log = logging.getLogger(__name__)

ENABLE_LORA_FLAG = "--enable-lora"
LIST_TIMEOUT_SECONDS = 3.0
# A Hugging Face id is downloaded by the engine while the call waits.
LOAD_TIMEOUT_SECONDS = 120.0
RETRY_SECONDS = 60.0


# vLLM wraps a worker's refusal: "Call to add_lora method failed: Worker failed with error
# '<why>', please check the stack trace above for the root cause".
_WORKER_ERROR = re.compile(r"failed with error '(.*)', please check", re.DOTALL)


@dataclass(frozen=True)
class Wanted:
    name: str
    source: str
    revision: str | None = None

    @property
    def fetched(self) -> bool:
        """Whether the pod's adapter fetcher copies it in before vLLM loads it."""
        return needs_fetch(self.source, self.revision)

    @property
    def path(self) -> str:
        """What vLLM is told to load, and lists as the adapter's root once loaded."""
        return fetched_path(self.source, self.revision) if self.fetched else self.source


@dataclass(frozen=True)
class Endpoint:
    """An engine's API, and the key it wants (None: it was given none)."""

    ip: str
    port: int
    key: BearerToken | None = None


class EngineApi(Protocol):
    def adapters(self, at: Endpoint) -> dict[str, str] | str | None:
        """Loaded adapters, name -> path loaded; why not when the engine refuses the call; None when
        it does not answer."""

    def load(self, at: Endpoint, name: str, source: str) -> str | None:
        """None when loaded, else why not."""

    def unload(self, at: Endpoint, name: str) -> str | None:
        """None when unloaded (or not loaded), else why not."""


def _call(
    url: str, body: Mapping[str, Any] | None, timeout: float, key: BearerToken | None
) -> tuple[int, str]:
    return call(url, body, timeout, key.headers() if key else None)


def _why(status: int, text: str) -> str:
    try:
        message = str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = text.strip()[:300] or f"HTTP {status}"
    inner = _WORKER_ERROR.search(message)
    return (inner.group(1) if inner else message).strip()


def refused(key: BearerToken | None) -> str:
    """Why an engine answers the operator 401 (or 403): its API key is not the one sent."""
    if key is None:
        return (
            "the engine wants an API key and the operator has none: give the key with "
            f"{API_KEY_FIELD} (not --api-key in spec.engine.extraArgs)"
        )
    return (
        f"the engine refused the key of {API_KEY_FIELD}: an engine reads it when it starts, so "
        "one started before the Secret changed wants the old key until it restarts"
    )


class HttpEngineApi:
    def adapters(self, at: Endpoint) -> dict[str, str] | str | None:
        base = pod_url(at.ip, at.port)
        if base is None:
            return None
        try:
            status, text = _call(f"{base}/v1/models", None, LIST_TIMEOUT_SECONDS, at.key)
            if status in (401, 403):
                return refused(at.key)
            models = json.loads(text)["data"] if status == 200 else None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.debug("cannot list the adapters of %s: %s", base, e)
            return None
        if not isinstance(models, list):
            return None
        # vLLM lists each adapter with its base as `parent` and its path as `root`.
        return {str(m["id"]): str(m.get("root") or "") for m in models if m.get("parent")}

    def load(self, at: Endpoint, name: str, source: str) -> str | None:
        base = pod_url(at.ip, at.port)
        if base is None:
            return f"no address {at.ip!r}"
        body = {"lora_name": name, "lora_path": source}
        try:
            status, text = _call(f"{base}/v1/load_lora_adapter", body, LOAD_TIMEOUT_SECONDS, at.key)
        except OSError as e:
            return f"the engine did not answer: {e}"
        if status == 200 or (status == 400 and "already been loaded" in text):
            return None
        if status in (401, 403):
            return refused(at.key)
        return _why(status, text)

    def unload(self, at: Endpoint, name: str) -> str | None:
        base = pod_url(at.ip, at.port)
        if base is None:
            return f"no address {at.ip!r}"
        body = {"lora_name": name}
        try:
            status, text = _call(
                f"{base}/v1/unload_lora_adapter", body, LIST_TIMEOUT_SECONDS, at.key
            )
        except OSError as e:
            return f"the engine did not answer: {e}"
        if status in (401, 403):
            return refused(at.key)
        return None if status in (200, 404) else _why(status, text)


@dataclass
class _Engine:
    loaded: dict[str, str] = field(default_factory=dict)  # name -> path (Wanted.path)
    failed: dict[str, tuple[str, str, float]] = field(default_factory=dict)  # -> path, why, at


@dataclass(frozen=True)
class EngineOutcome:
    """One engine after a sync: what it serves, what it could not load and why, and whether
    every wanted adapter was tried (its readiness gate may open)."""

    pod: str
    loaded: frozenset[str]
    failed: Mapping[str, str]
    complete: bool
    # A load or unload was sent in this sync: the engine may have held its steps meanwhile.
    called: bool = False


def lora_engines(pods: Iterable[dict[str, Any]], container_name: str) -> list[dict[str, Any]]:
    """Engine pods that serve with LoRA on and whose vLLM answers: not being deleted, with an IP,
    containers ready (not Ready: the adapters gate holds that until they are loaded), and
    `--enable-lora` on the engine container (a previous layout's pods included: they serve)."""
    out = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp") or not status.get("podIP"):
            continue
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        if conditions.get("ContainersReady") != "True":
            continue
        containers = (pod.get("spec") or {}).get("containers") or []
        engine = next((c for c in containers if c.get("name") == container_name), None)
        if engine is None or ENABLE_LORA_FLAG not in (engine.get("args") or ()):
            continue
        out.append(pod)
    return out


def _key(pod: dict[str, Any]) -> tuple[str, int]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    return str(pod["metadata"]["uid"]), restarts


class AdapterSync:
    """Per LLMDeployment, the adapters each engine holds; `sync` converges them on the spec."""

    def __init__(
        self, port: int, api: EngineApi | None = None, fetcher: FetcherApi | None = None
    ) -> None:
        self._port = port
        self._api: EngineApi = api or HttpEngineApi()
        self._fetcher: FetcherApi = fetcher or HttpFetcherApi()
        self._lock = threading.Lock()
        self._engines: dict[tuple[str, str], dict[tuple[str, int], _Engine]] = {}

    def sync(
        self,
        namespace: str,
        name: str,
        wanted: Sequence[Wanted],
        pods: Sequence[dict[str, Any]],
        api_key: BearerToken | None = None,
        *,
        fetcher_token: BearerToken | None = None,
    ) -> tuple[EngineOutcome, ...]:
        """`api_key`: what the engines want, spec.engine.apiKeySecretRef's (None without one);
        `fetcher_token`: what their adapter fetchers want (None: the pods run none)."""
        key = (namespace, name)
        with self._lock:
            known = self._engines.get(key, {})
        todo = [(_key(p), p) for p in pods]
        results = []
        if todo:
            with ThreadPoolExecutor(max_workers=min(16, len(todo))) as pool:
                results = list(
                    pool.map(
                        lambda t: self._converge(
                            t[1],
                            engine=known.get(t[0]),
                            wanted=wanted,
                            api_key=api_key,
                            fetcher_token=fetcher_token,
                        ),
                        todo,
                    )
                )
        fresh = {k: e for (k, _), (_, e) in zip(todo, results, strict=True) if e is not None}
        with self._lock:
            self._engines[key] = fresh
        return tuple(sorted((o for o, _ in results), key=lambda o: o.pod))

    def staying(
        self,
        namespace: str,
        name: str,
        wanted: Sequence[Wanted],
        pods: Iterable[dict[str, Any]],
    ) -> dict[str, frozenset[str]]:
        """Before a sync, per pod whose engine this operator knows (same uid and restarts): the
        adapters it holds that the next sync leaves loaded (wanted, from the same source)."""
        with self._lock:
            known = dict(self._engines.get((namespace, name), {}))
        paths = {w.name: w.path for w in wanted}
        out = {}
        for pod in pods:
            engine = known.get(_key(pod))
            if engine is not None:
                keep = (a for a, path in engine.loaded.items() if paths.get(a) == path)
                out[str(pod["metadata"]["name"])] = frozenset(keep)
        return out

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._engines.pop((namespace, name), None)

    def _converge(
        self,
        pod: dict[str, Any],
        *,
        engine: _Engine | None,
        wanted: Sequence[Wanted],
        api_key: BearerToken | None,
        fetcher_token: BearerToken | None,
    ) -> tuple[EngineOutcome, _Engine | None]:
        pod_name = str(pod["metadata"]["name"])
        at = Endpoint(str(pod["status"]["podIP"]), self._port, api_key)
        if engine is None:
            listed = self._api.adapters(at)
            if listed is None:  # not answering yet: nothing known, nothing tried
                return EngineOutcome(pod_name, frozenset(), {}, complete=False), None
            if isinstance(listed, str):  # the key is refused: nothing known, asked again
                failed = {w.name: listed for w in wanted}
                return EngineOutcome(pod_name, frozenset(), failed, complete=False), None
            engine = _Engine(loaded=listed)
        want = {w.name: w for w in wanted}
        now = time.monotonic()
        unloaded_fetched = called = False
        for adapter, path in sorted(engine.loaded.items()):
            w = want.get(adapter)
            if w is not None and w.path == path:
                continue
            called = True
            if self._api.unload(at, adapter) is None:
                del engine.loaded[adapter]
                unloaded_fetched |= path.startswith(f"{FETCH_ROOT}/")
        engine.failed = {
            a: f
            for a, f in engine.failed.items()
            if a in want and want[a].path == f[0] and a not in engine.loaded
        }
        fetcher = fetcher_token if has_fetcher(pod) else None
        if unloaded_fetched and fetcher is not None:
            # Before fetching: a replaced adapter's old copy counts against the fetcher's caps.
            self._fetcher.prune(at.ip, fetcher, (w.path for w in wanted if w.fetched))
        for adapter, w in sorted(want.items()):
            if adapter in engine.loaded:
                continue
            if adapter in engine.failed and now - engine.failed[adapter][2] < RETRY_SECONDS:
                continue
            called = True
            why = self._place(fetcher, at, w)
            if why is None:
                engine.loaded[adapter] = w.path
                engine.failed.pop(adapter, None)
            else:
                log.info(
                    "engine %s: adapter %s (%s) did not load: %s", pod_name, adapter, w.source, why
                )
                engine.failed[adapter] = (w.path, why, now)
        outcome = EngineOutcome(
            pod=pod_name,
            loaded=frozenset(a for a in engine.loaded if a in want),
            failed={a: f[1] for a, f in engine.failed.items()},
            complete=all(a in engine.loaded or a in engine.failed for a in want),
            called=called,
        )
        return outcome, engine

    def _place(self, fetcher: BearerToken | None, at: Endpoint, w: Wanted) -> str | None:
        """Loads `w` into the engine, through the pod's fetcher (`fetcher`: its token, None
        where it runs none) first where vLLM cannot read its source; None when loaded, else why
        not."""
        if w.fetched:
            if fetcher is None:
                return NO_FETCHER
            why = self._fetcher.fetch(at.ip, fetcher, w.source, w.revision)
            if why is not None:
                return why
        return self._api.load(at, w.name, w.path)


def gates_to_open(pods: Iterable[dict[str, Any]], outcomes: Iterable[EngineOutcome]) -> list[str]:
    """Names of the pods whose adapters gate is not yet True and whose engine has tried every
    wanted adapter (an adapter that fails to load is reported in status; it does not keep the
    pod out of service for the others)."""
    done = {o.pod for o in outcomes if o.complete}
    out = []
    for pod in pods:
        gates = [
            g.get("conditionType") for g in (pod.get("spec") or {}).get("readinessGates") or []
        ]
        if ADAPTERS_GATE not in gates or pod["metadata"]["name"] not in done:
            continue
        conditions = (pod.get("status") or {}).get("conditions") or []
        if not any(
            c.get("type") == ADAPTERS_GATE and c.get("status") == "True" for c in conditions
        ):
            out.append(str(pod["metadata"]["name"]))
    return sorted(out)
