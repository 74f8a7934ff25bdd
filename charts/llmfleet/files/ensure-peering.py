"""Create the kopf peering object NAME (a ClusterKopfPeering, or a KopfPeering in each NAMESPACE)
if missing: `python -c <this file> NAME [NAMESPACE ...]`, the operator pod's init container.
kopf only patches it; as a template next to its own CRD it would fail a fresh `helm install`."""

import json
import os
import sys
import time

from kubernetes import client, config
from kubernetes.client.rest import ApiException

name, namespaces = sys.argv[1], sys.argv[2:]
labels = json.loads(os.environ.get("PEERING_LABELS", "{}"))
config.load_incluster_config()
api = client.CustomObjectsApi()


def create(namespace):
    kind = "KopfPeering" if namespace else "ClusterKopfPeering"
    body = {"apiVersion": "kopf.dev/v1", "kind": kind, "metadata": {"name": name, "labels": labels}}
    if namespace:
        api.create_namespaced_custom_object("kopf.dev", "v1", namespace, "kopfpeerings", body)
    else:
        api.create_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", body)
    print(f"created {kind} {name}" + (f" in {namespace}" if namespace else ""))


for namespace in namespaces or [None]:
    for attempt in range(90):
        try:
            create(namespace)
            break
        except ApiException as e:
            if e.status == 409:  # already there, e.g. from an earlier pod or release
                break
            if e.status != 404 or attempt == 89:  # 404: the CRD is not established yet
                raise
            time.sleep(2)
