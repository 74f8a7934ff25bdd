"""The engine stand-in: vLLM's OpenAI server as the operator and the router see it, without vLLM.

A vLLM server pod annotated `lab.llmfleet.test/engine: stand-in` is run by the node runner with
`python3 -m localcluster.standin` in place of `vllm serve`, on the same command line
(docs/cpu-adaptations.md, "stand-in"). It starts in about a second where vLLM takes 35-90 s on
this machine, for the e2e tests that are about the operator or the router
and not about vLLM (issue 32).

What it keeps of vLLM 0.32 (tests/e2e/test_engine_standin_contract.py holds it to that against
the real pinned vLLM, on one command line):

- the command line: every flag vLLM takes is accepted; those below are read, the rest ignored;
- `/health` (and no listener at all until the warm-up is over, as vLLM opens its port only once
  the engine is up), `/v1/models`, `/v1/completions` and `/v1/chat/completions` (JSON and SSE
  streams, `usage`, `data: [DONE]`), `/version`, `/ping`, `/load`, `/metrics`; VLLM_API_KEY /
  `--api-key` guard `/v1` as vLLM's middleware does;
- `/metrics`: vLLM's `vllm:` families with their types, labels, help texts and buckets
  (metrics.py); `vllm:cache_config_info` with the KV cache the CPU build allocates from
  VLLM_CPU_KVCACHE_SPACE and the model's config.json (config.py), so PlanVerified verifies or
  fails exactly as on vLLM;
- the scheduler's numbers (scheduler.py): at most `--max-num-seqs` requests running, the rest
  waiting in arrival order; KV blocks allocated per request, and the newest running request
  preempted when they run out; one token per running request per engine step, a step taking
  LLMFLEET_STANDIN_TOKEN_S seconds (default 0.02);
- SIGTERM: requests in flight finish within `--shutdown-timeout` (0: they end at once, cut
  short, as vLLM's abort mode) while the port stays open, `/health` answers 200 and a new
  completion fails with vLLM's 500 ("cannot schedule new futures after shutdown"); then the port
  closes and the process exits 0;
- sleep mode, under VLLM_SERVER_DEV_MODE=1 with `--enable-sleep-mode` (every dev path 404
  `{"detail":"Not Found"}` without dev mode), as vLLM 0.26 answered on an H200
  (bench/gpu/h200-2026-11-27-sleep.jsonl): `POST /sleep?level=&mode=` (level 0-2, default 1;
  mode abort, wait or keep) and `POST /wake_up` answer 200 with an empty body, `GET
  /is_sleeping` `{"is_sleeping":...}`; a sleeping engine takes requests on /v1 and answers them
  after the wake (vLLM pauses its scheduler). Sleeping takes LLMFLEET_STANDIN_SLEEP_S, waking
  LLMFLEET_STANDIN_WAKE_S (defaults: 10.3 s and 0.69 s, measured, scaled as the warm-up is);
- the other dev-mode paths vLLM opens on the same port, unauthenticated: `/collective_rpc`
  (500, no worker method exists here), `/reset_prefix_cache` `{"success":true}`, `/server_info`,
  `/pause` `{"status":"paused"}` (the scheduler stops), `/is_paused`; the API key does not guard
  any dev path, as vLLM's does not;
- a model directory without config.json, or a KV cache too small for one request of
  `--max-model-len`, ends the process at start with exit code 1, as vLLM's start fails.

What it does not: compute anything. The text is made-up words, the token counts of prompts are
estimates (no tokenizer), every request runs to max_tokens (finish reason `length`), and no
prefix caching, LoRA, sampling parameter or tool call has any effect.

Environment: LLMFLEET_STANDIN_TOKEN_S (seconds per engine step), LLMFLEET_STANDIN_WARMUP_S
(seconds before the port opens, default 1), LLMFLEET_STANDIN_START_PHASES (the start as
`name=seconds,...` phases, logged as each ends, in place of the warm-up: startphases.py),
LLMFLEET_STANDIN_SLEEP_S and LLMFLEET_STANDIN_WAKE_S (seconds /sleep and /wake_up take).
"""
