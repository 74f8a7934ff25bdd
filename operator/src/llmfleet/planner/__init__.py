"""The layout planner: pure functions from an LLMDeploymentSpec to a Plan. No I/O."""

from llmfleet.planner.candidates import MIN_CONCURRENT_SEQUENCES
from llmfleet.planner.errors import PlanError
from llmfleet.planner.planning import plan
from llmfleet.planner.result import Plan

__all__ = ["MIN_CONCURRENT_SEQUENCES", "Plan", "PlanError", "plan"]
