"""Observability as code: the chart's Grafana dashboards (`dashboards.generate`, written to
charts/llmfleet/dashboards/ by `make dashboards`) and the PromQL helpers they share with the tests
and benchmarks (`dashboards.promql`). Development only: the operator never imports it, and its
Grafana SDK is a dev dependency. The alert rules live in the chart,
charts/llmfleet/files/prometheus-rules.yaml."""
