"""``python -m bisector``: the ``bisector`` command."""
import sys

from bisector.cli.main import main

sys.exit(main())
