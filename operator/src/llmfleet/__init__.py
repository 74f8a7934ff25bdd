"""LLMFleet: plans, deploys and autoscales fleets of vLLM servers on Kubernetes."""

API_GROUP = "llmfleet.dev"
API_VERSION = "v1alpha1"
FIELD_MANAGER = "llmfleet-operator"

# The release: operator/pyproject.toml, the chart's version and appVersion, the image tags and
# CHANGELOG.md carry the same one (tests/unit/test_release.py).
__version__ = "0.2.0"
