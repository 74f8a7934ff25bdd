"""A status is written only onto the object as the reconcile read it: a status a newer leader
wrote meanwhile is never overwritten by a replica that read before it (the API server's own
resourceVersion check, here against the real API server)."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localcluster.metricsstack.load import TINY_ARCHITECTURE
from manifests import create, custom

from llmfleet import API_GROUP, API_VERSION
from llmfleet.models.batchjob import PLURAL as BATCH_PLURAL
from llmfleet.reconcile.llmbatchjob.batchjob import BatchJobController
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

pytestmark = pytest.mark.cluster

SPEC = {
    "model": {"name": "/models/tiny-llama", "architecture": TINY_ARCHITECTURE},
    "engine": {"maxModelLen": 512},
    "shards": 1,
    "input": {"configMap": {"name": "prompts", "key": "prompts.jsonl"}},
    "output": {"persistentVolumeClaim": {"claimName": "results", "path": "run-1"}},
}


def stored_generation(api: client.ApiClient, namespace: str, name: str) -> int | None:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object_status(
        API_GROUP, API_VERSION, namespace, BATCH_PLURAL, name
    )
    generation: int | None = (obj.get("status") or {}).get("observedGeneration")
    return generation


def test_a_stale_writer_cannot_overwrite_a_newer_status(
    api: client.ApiClient, namespace: str
) -> None:
    create(api, namespace, custom("LLMBatchJob", "stale", SPEC))
    old_leader = BatchJobController(api, FLEET, scraper=lambda _ip: None)
    new_leader = BatchJobController(api, FLEET, scraper=lambda _ip: None)
    try:
        read_before = old_leader.fetch(namespace, "stale")
        assert read_before is not None
        fresh = new_leader.fetch(namespace, "stale")
        assert fresh is not None
        assert new_leader.write_status(fresh, new_leader.status_model(observed_generation=7))
        # The same reconcile writes again onto what it wrote (it carries the new version).
        assert new_leader.write_status(fresh, new_leader.status_model(observed_generation=8))

        with pytest.raises(ApiException) as conflict:
            old_leader.write_status(read_before, old_leader.status_model(observed_generation=1))
        assert conflict.value.status == 409
        assert stored_generation(api, namespace, "stale") == 8

        # Retried from a fresh read (as its queue does), the old leader's write would land.
        reread = old_leader.fetch(namespace, "stale")
        assert reread is not None
        assert old_leader.write_status(reread, old_leader.status_model(observed_generation=1))
        assert stored_generation(api, namespace, "stale") == 1
    finally:
        old_leader.view.stop()
        new_leader.view.stop()
