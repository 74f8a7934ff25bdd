"""Observability as code: Grafana dashboards (`llmfleet.observability.dashboards`) and the PromQL
helpers they share with tests (`llmfleet.observability.promql`). The alert rules live in the
chart, charts/llmfleet/files/prometheus-rules.yaml."""
