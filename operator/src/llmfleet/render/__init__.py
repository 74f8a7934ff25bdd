"""Pure functions from (owner, spec, plan) to Kubernetes manifests: deterministic, sorted dicts."""

from llmfleet.render.fleet import render_fleet
from llmfleet.render.names import Owner, engine_deployment_name

__all__ = ["Owner", "engine_deployment_name", "render_fleet"]
