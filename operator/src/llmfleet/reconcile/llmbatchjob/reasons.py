"""The words an LLMBatchJob's status and Events are read by: each condition type and each reason
it can carry, named once. Users and their tools match on these strings (`kubectl wait
--for=condition=Complete`, the Running reason in `kubectl get`'s columns), so a change here is a
change of the API."""

from __future__ import annotations

# Condition types.
RUNNING = "Running"
PREEMPTED = "Preempted"
COMPLETE = "Complete"
FAILED = "Failed"

# Running (besides a blocker's own reason, machinery/causes.py).
SHARDS_RUNNING = "ShardsRunning"
SHARDS_STARTING = "ShardsStarting"
SHARDS_PREEMPTED = "ShardsPreempted"
FINISHED = "Finished"  # Running and Preempted, once the job completed or failed
# A Spare job that waits for the operator's spare PriorityClass (spare.py); every condition but
# Preempted carries it.
SPARE_CLASS_UNSET = "SparePriorityClassUnset"
SPARE_CLASS_NOT_FOUND = "SparePriorityClassNotFound"

# Preempted (and SHARDS_PREEMPTED, FINISHED).
RESUMED = "Resumed"
NOT_PREEMPTED = "NotPreempted"

# Complete.
ALL_LINES_ANSWERED = "AllLinesAnswered"
IN_PROGRESS = "InProgress"  # Complete and Failed, while the job runs
JOB_FAILED = FAILED  # Complete, once the job failed

# Failed (besides the Job controller's own reason, e.g. BackoffLimitExceeded).
JOB_COMPLETE = COMPLETE  # once the job completed
FAILED_BY_JOB = "JobFailed"  # when the Job controller gave no reason
MULTI_NODE_NOT_SUPPORTED = "MultiNodeNotSupported"  # a refused plan: one pod per shard

# Events (reasons of their own; a Warning for a condition carries the condition's reason).
CREATED_EVENT = "Created"
PREEMPTED_EVENT = "Preempted"
COMPLETE_EVENT = "Complete"
FAILED_EVENT = "Failed"
RESUMED_EVENT = "Resumed"
