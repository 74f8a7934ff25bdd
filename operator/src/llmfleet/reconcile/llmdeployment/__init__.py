"""The LLMDeployment's reconcile: `controller.Controller` plans, renders, applies and prunes its
fleet, and `status` builds its status from what the cluster shows (one function per condition,
the reasons in `reasons`). Beside them, each with a job of its own: LoRA adapters in the engines
(`adapters`, `adapter_status`, and the adapter fetcher's side: `fetching`, `fetcher_token`), the
KV cache the engines allocated (`kvcache`, `plan_verified`), stalled engines (`stall`,
`stallwatch`), standby engines (`standby`, `standbyloop`), the autoscalers (`autoscaler_status`),
crashing and unschedulable engines (`engine_crashes`, `unschedulable`).

Built on `reconcile.machinery`; never imports `reconcile.llmbatchjob`."""
