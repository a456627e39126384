"""``python -m tcbench.cli``."""

import sys

from tcbench.cli.app import main

sys.exit(main())
