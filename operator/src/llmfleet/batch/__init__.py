"""The LLMBatchJob runner: offline batch inference of OpenAI Batch API JSONL files with vLLM's
offline engine, one shard per process, resumable.

Runs in the vLLM image (`python3 -m llmfleet.batch.runner`) and locally (`llmfleet batch run`).
Only `engine.py` touches vLLM, imported lazily: the operator image has no vLLM, and the operator
imports `progress` (to read the runner's metrics) and nothing else from here.
"""
