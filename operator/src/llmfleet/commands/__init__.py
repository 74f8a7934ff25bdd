"""Subcommands of the `llmfleet` CLI."""
