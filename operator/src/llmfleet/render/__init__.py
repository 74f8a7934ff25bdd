"""Pure functions from (owner, spec, plan) to Kubernetes manifests: deterministic, sorted dicts."""

from llmfleet.render.fleet import RenderedFleet, render_fleet
from llmfleet.render.fleet_defaults import FleetDefaults
from llmfleet.render.names import Owner, engine_deployment_name

__all__ = ["FleetDefaults", "Owner", "RenderedFleet", "engine_deployment_name", "render_fleet"]
