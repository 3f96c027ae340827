"""``python -m marti_trainer.cli ...``: the ``marti`` command without its console script."""

import sys

from marti_trainer.cli import main

sys.exit(main())
