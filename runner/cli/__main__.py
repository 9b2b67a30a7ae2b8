"""`python -m runner.cli …`: the same as the `madbench` script."""

import sys

from runner.cli import main

sys.exit(main())
