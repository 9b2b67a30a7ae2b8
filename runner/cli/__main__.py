"""`python -m madbench.runner.cli …`: the same as the `madbench` script."""

import sys

from madbench.runner.cli import main

sys.exit(main())
