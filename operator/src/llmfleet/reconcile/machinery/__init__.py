"""The controller machinery both kinds share, and nothing of either kind: the watch-fed view of
the children (`cache`), one work queue and control loop per kind (`workqueue`, `loop`), leader
election and the write gate every write goes through (`leader`, `writegate`), server-side apply
and drift (`apply`, `drift`), Events and API errors (`events`, `errors`), the one HTTP client for
pods (`podcall`), the periodic resync (`resync`), status conditions (`conditions`,
`object_fields`), and the shared `Reconciler` (`base`) with what it reads for every kind: the
Secrets a spec names (`secrets`), the objects it references (`references`), why a pod cannot run
(`pod_blockers` from the scheduler and the volume Events, `container_blockers` from the kubelet,
in the words of `causes`; what the scheduler and an exiting container said, `scheduler_words` and
`exit_words`), and the model's config.json (`modelconfig`).

It imports neither `llmdeployment` nor `llmbatchjob` (tests/unit/test_layout.py)."""
