"""The RBAC the chart grants the operator: the rules it needs for what it manages, and the roles
of one object each that sit beside them (the leader Lease, the spare PriorityClass, the fetcher
key), as the chart's unit tests compare them."""

from __future__ import annotations

from typing import Any

RBAC_KINDS = {"ClusterRole", "Role"}
# What the operator may do to the kinds it creates, prunes and keeps from drifting.
MANAGES = frozenset({"get", "list", "watch", "create", "patch", "delete"})
EXPECTED_RULES = {
    # Read and watched; only their status is written (kopf's handlers store nothing in them).
    ("llmfleet.dev", "llmdeployments"): {"get", "list", "watch"},
    ("llmfleet.dev", "llmdeployments/status"): {"get", "patch"},
    ("apps", "deployments"): MANAGES,
    ("", "services"): MANAGES,
    ("", "configmaps"): MANAGES,
    ("autoscaling", "horizontalpodautoscalers"): MANAGES,
    ("policy", "poddisruptionbudgets"): MANAGES,
    ("networking.k8s.io", "networkpolicies"): MANAGES,
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): MANAGES,
    ("keda.sh", "scaledobjects"): MANAGES,
    ("", "serviceaccounts"): MANAGES,
    ("rbac.authorization.k8s.io", "roles"): MANAGES,
    ("rbac.authorization.k8s.io", "rolebindings"): MANAGES,
    ("", "pods"): {"get", "list", "watch", "delete"},
    ("", "pods/status"): {"patch"},
    ("llmfleet.dev", "llmbatchjobs"): {"get", "list", "watch"},
    ("llmfleet.dev", "llmbatchjobs/status"): {"get", "patch"},
    ("batch", "jobs"): MANAGES,
    ("", "events"): {"create", "patch", "list"},
    ("events.k8s.io", "events"): {"create", "patch"},
    # The adapter fetchers' and the standby engines' token Secrets, created and never read.
    ("", "secrets"): {"create"},
}


def granted(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def is_lease_rbac(doc: dict[str, Any]) -> bool:
    return str(doc["metadata"]["name"]).endswith("-leader-election")


def is_priority_class_rbac(doc: dict[str, Any]) -> bool:
    return str(doc["metadata"]["name"]).endswith("-priority-classes")


def is_fetcher_key_rbac(doc: dict[str, Any]) -> bool:
    return str(doc["metadata"]["name"]).endswith("-fetcher-key")


def beside_the_operator_rules(doc: dict[str, Any]) -> bool:
    """RBAC of one object each: the leader Lease, the spare PriorityClass, the fetcher key."""
    return is_lease_rbac(doc) or is_priority_class_rbac(doc) or is_fetcher_key_rbac(doc)
