"""LLMFleet: plans, deploys and autoscales fleets of vLLM servers on Kubernetes."""

API_GROUP = "llmfleet.dev"
API_VERSION = "v1alpha1"
FIELD_MANAGER = "llmfleet-operator"

__version__ = "0.1.0"
