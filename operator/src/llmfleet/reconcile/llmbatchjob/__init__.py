"""The LLMBatchJob's reconcile: `batchjob.BatchJobController` validates, plans and creates the
job's Indexed Job and reads its shards' progress; `batchstatus` builds its status from the Job and
its pods, `batchconditions` its conditions (one function each), with the reasons in `reasons`.
Beside them: what one shard pod shows (`batchpods`), preempted shards (`preemption`) and the
Spare priority (`spare`).

Built on `reconcile.machinery`; never imports `reconcile.llmdeployment`."""
