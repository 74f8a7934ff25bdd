"""The only package that talks to the Kubernetes API, in rooms by trade:

- `machinery/`: the controller machinery both kinds share: the watch-fed view of the children
  (cache), the work queue and the control loop per kind, leader election and the write gate,
  server-side apply and drift, Events, errors, calls to pods, the resync, status conditions, and
  the shared `Reconciler` (base) with what it reads for every kind (secrets, references, causes,
  the model's config.json).
- `llmdeployment/`: the LLMDeployment's reconcile (`controller.py`) and its status, adapters,
  KV cache, stall watch and standby engines.
- `llmbatchjob/`: the LLMBatchJob's reconcile (`batchjob.py`) and its status, shard pods,
  preemptions and Spare priority.
- `manager.py`: wires them together: one control loop per kind and what feeds it.

The two kinds' rooms never import each other, and the machinery imports neither
(tests/unit/test_layout.py)."""
