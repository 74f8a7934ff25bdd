"""`make demo`: the local cluster with fake GPU nodes, the chart, the examples and their plans,
the metrics path the HPAs read, and a real vLLM answering a chat request at the endpoint the
LLMDeployment's status names; last, each LLMDeployment with its conditions and why it runs or
waits. Everything stays up afterwards; `make cluster-down` stops it all.

`run()` is the demo (story.py); `main()` (`python -m localcluster.demo`) runs it on the cluster
`make cluster-up` started and turns a step that does not come true into one message on stderr
and exit status 1. The e2e test `tests/e2e/test_demo.py` calls the same `run()` and
`tear_down()`. prerequisites.py makes the Secrets and claim the examples name, serving.py sends
the chat request, report.py says where each LLMDeployment stands.
"""

from .serving import DemoError
from .story import (
    DEMO_NAMESPACE,
    GPU_EXAMPLES,
    LOCAL_NAME,
    main,
    tear_down,
)
from .story import run_demo as run

__all__ = ["DEMO_NAMESPACE", "GPU_EXAMPLES", "LOCAL_NAME", "DemoError", "main", "run", "tear_down"]
