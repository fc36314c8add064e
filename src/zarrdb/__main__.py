"""`python -m zarrdb`: the zarrdb command line (see zarrdb.cli)."""

import sys

from zarrdb.cli import main

sys.exit(main())
