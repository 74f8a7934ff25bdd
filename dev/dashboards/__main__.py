"""`python -m dashboards --output-dir charts/llmfleet/dashboards` (PYTHONPATH=dev)."""

import sys

from .generate import main

sys.exit(main())
