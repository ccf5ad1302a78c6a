"""``python -m nightshift``: the same as the ``nightshift`` console script."""

import sys

from nightshift.cli.main import main

sys.exit(main())
