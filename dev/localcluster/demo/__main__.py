"""`python -m localcluster.demo` (`make demo`)."""

import sys

from . import main

sys.exit(main())
