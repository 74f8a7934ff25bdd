"""Pure functions from (owner, spec, plan) to Kubernetes manifests: deterministic, sorted dicts."""

from llmfleet.render.fleet import render_fleet
from llmfleet.render.fleet_defaults import FleetDefaults
from llmfleet.render.names import Owner, engine_deployment_name

__all__ = ["FleetDefaults", "Owner", "engine_deployment_name", "render_fleet"]
