"""The LLMBatchJob runner: offline batch inference of OpenAI Batch API JSONL files with vLLM's
offline engine, one shard per process, resumable.

Runs in the vLLM image (`python3 -m llmfleet.batch.runner`) and locally (`llmfleet batch run`).
Only `engine.py` touches vLLM, imported lazily. The operator imports nothing from here: what it
reads of a shard, and how, is `llmfleet.shard_report`, which the runner writes.
"""
