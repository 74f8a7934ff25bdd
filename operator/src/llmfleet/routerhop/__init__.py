"""The router hop: a small HTTP pass-through in front of vllm-router in the router pod of an
LLMDeployment with adapters, which sends a request for adapter X only to an engine whose pod is
marked as serving X (the pod condition `llmfleet.dev/adapters-serving`), and everything else to
vllm-router unchanged. vllm-router 0.1.17 routes by load and prefix, never by `model`
(docs/router.md, "Adapters"), so without the hop a request for X can reach an engine that lacks X
and get vLLM's 404.

It runs from the operator's image under its own version (release.py), as `python -m
llmfleet.routerhop` (render.routerhop renders the container), and imports nothing of llmfleet
outside this package: what it runs is what release.HOP_SOURCES_SHA256 hashes."""
