"""``python -m redrive.cli``: the ``redrive`` command line."""

import sys

from . import main

sys.exit(main())
