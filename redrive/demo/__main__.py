"""``python -m redrive.demo``: run the demo."""

import sys

from . import main

sys.exit(main())
