"""The metrics path of a production cluster, on the local cluster: Prometheus (built from its Go
module by build-tools.sh; Debian supplies only promtool) discovering and scraping the engine pods,
kube-state-metrics and the operator; prometheus-adapter serving `custom.metrics.k8s.io` to the HPA
controller through the aggregation layer. See docs/autoscaling.md."""

from .cmdlines import ADAPTER_RULES
from .names import NAMESPACE
from .stack import MetricsStack

__all__ = ["ADAPTER_RULES", "NAMESPACE", "MetricsStack"]
