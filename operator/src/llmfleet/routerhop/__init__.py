"""The router hop: a small HTTP pass-through in front of vllm-router in every router pod.

It binds late (admission.py): a request waits in the hop until the Ready engines have room for
it, so that a burst's backlog goes to engines as they become Ready instead of piling into the
queues of the engines that existed when it arrived (vllm-router binds each request at once).

It sends a request for adapter X only to an engine whose pod is marked as serving X (the pod
condition `llmfleet.dev/adapters-serving`), and everything else to vllm-router unchanged, whose
policy picks the engine. vllm-router 0.1.17 routes by load and prefix, never by `model`
(docs/router.md, "Adapters"), so without the hop a request for X can reach an engine that lacks X
and get vLLM's 404.

It runs from the operator's image under its own version (release.py), as `python -m
llmfleet.routerhop` (render.routerhop renders the container), and imports nothing of llmfleet
outside this package: what it runs is what release.HOP_SOURCES_SHA256 hashes."""
