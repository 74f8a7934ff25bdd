"""The KV cache each running vLLM engine really allocated, read from its own /metrics.

vLLM exports `vllm:cache_config_info` (value 1, the cache configuration as labels) once its KV
cache is allocated: `kv_cache_size_tokens` where the version has it, and always `num_gpu_blocks`
and `block_size`. The figure does not change for the life of a pod, so each pod is read once
(keyed by its uid) and a resync neither dials the engines nor, with the same figures, writes.
Reads run in parallel with a short timeout; a pod that does not answer is asked again only after
RETRY_SECONDS, so an unreachable engine never holds a reconcile up for more than one timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from llmfleet.reconcile.machinery.podcall import read_page

log = logging.getLogger(__name__)

CACHE_CONFIG_INFO = "vllm:cache_config_info"
SCRAPE_TIMEOUT_SECONDS = 1.5
RETRY_SECONDS = 30.0
# vLLM's /metrics is some hundred KiB; anything far larger is not a vLLM engine.
MAX_PAGE_BYTES = 8 * 1024 * 1024

# (pod IP, port) -> the /metrics page, or None when the engine does not answer.
Scraper = Callable[[str, int], str | None]


def scrape(pod_ip: str, port: int) -> str | None:
    return read_page(pod_ip, port, "/metrics", SCRAPE_TIMEOUT_SECONDS, MAX_PAGE_BYTES)


def _int_label(labels: dict[str, str], key: str) -> int | None:
    try:
        value = int(float(labels[key]))
    except (KeyError, ValueError, OverflowError):
        return None
    return value if value >= 0 else None


def parse_kv_cache_tokens(text: str) -> int | None:
    """KV-cache tokens from a vLLM /metrics page: `kv_cache_size_tokens` of
    `vllm:cache_config_info`, else `num_gpu_blocks x block_size`; the smallest when several
    engines share the page; None when the page has no such figure (not a vLLM engine, or one
    that has not allocated its cache)."""
    # Only the family's own lines are parsed: the rest of the page is not ours to validate.
    lines = [
        line
        for line in text.splitlines()
        if line.startswith((CACHE_CONFIG_INFO, f"# HELP {CACHE_CONFIG_INFO} "))
        or line.startswith(f"# TYPE {CACHE_CONFIG_INFO} ")
    ]
    found: list[int] = []
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            for sample in family.samples:
                if sample.name != CACHE_CONFIG_INFO:
                    continue
                tokens = _int_label(sample.labels, "kv_cache_size_tokens")
                if tokens is None:
                    blocks = _int_label(sample.labels, "num_gpu_blocks")
                    size = _int_label(sample.labels, "block_size")
                    tokens = None if blocks is None or size is None else blocks * size
                if tokens is not None:
                    found.append(tokens)
    except ValueError:
        return None
    return min(found) if found else None


def _ready(pod: dict[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def reporting_engines(
    pods: Iterable[dict[str, Any]], template: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The pods whose KV cache counts: Ready, not being deleted, with an IP, and running the
    current pod template's vLLM command line (pods of a rollout's previous template, or of a
    previous layout, were sized by another plan). `template` is the engine Deployment's
    spec.template; without one nothing counts."""
    if not template:
        return []
    want_labels = (template.get("metadata") or {}).get("labels") or {}
    want_args = _command_lines(template)
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if meta.get("deletionTimestamp") or not (pod.get("status") or {}).get("podIP"):
            continue
        if any(labels.get(k) != v for k, v in want_labels.items()):
            continue
        if _command_lines(pod) != want_args or not _ready(pod):
            continue
        out.append(pod)
    return out


def _command_lines(pod_or_template: dict[str, Any]) -> list[tuple[str, ...]]:
    containers = (pod_or_template.get("spec") or {}).get("containers") or []
    return [
        (str(c.get("name")), *map(str, c.get("command") or ()), *map(str, c.get("args") or ()))
        for c in containers
    ]


def scrape_all(scraper: Scraper, ips: list[str], port: int) -> list[str | None]:
    """Each pod's /metrics page (None where unread), read side by side: a slow engine must not
    hold up the others'."""
    if not ips:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(ips))) as pool:
        return list(pool.map(lambda ip: scraper(ip, port), ips))


class EngineKVCache:
    """Per LLMDeployment, the KV-cache tokens each engine pod reported, by pod uid."""

    def __init__(self, port: int, scraper: Scraper = scrape) -> None:
        self._port = port
        self._scraper = scraper
        self._lock = threading.Lock()
        self._tokens: dict[tuple[str, str], dict[str, int]] = {}
        self._failed: dict[tuple[str, str], dict[str, float]] = {}

    def measure(self, namespace: str, name: str, pods: Iterable[dict[str, Any]]) -> tuple[int, ...]:
        """The figures of `pods` (the reporting engines), reading only pods not read before;
        pods that are gone are forgotten. Sorted, one per pod that has reported."""
        key = (namespace, name)
        now = time.monotonic()
        by_uid = {
            str(p["metadata"]["uid"]): p for p in pods if (p.get("metadata") or {}).get("uid")
        }
        with self._lock:
            known = {u: t for u, t in self._tokens.get(key, {}).items() if u in by_uid}
            failed = {
                u: at
                for u, at in self._failed.get(key, {}).items()
                if u in by_uid and now - at < RETRY_SECONDS
            }
        todo = sorted(u for u in by_uid if u not in known and u not in failed)
        if todo:
            ips = [str(by_uid[u]["status"]["podIP"]) for u in todo]
            pages = scrape_all(self._scraper, ips, self._port)
            for uid, page in zip(todo, pages, strict=True):
                tokens = parse_kv_cache_tokens(page) if page else None
                if tokens is None:
                    failed[uid] = now
                else:
                    known[uid] = tokens
        with self._lock:
            self._tokens[key] = known
            self._failed[key] = failed
        return tuple(sorted(known.values()))

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._tokens.pop((namespace, name), None)
            self._failed.pop((namespace, name), None)
