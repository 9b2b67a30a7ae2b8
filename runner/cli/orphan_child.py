"""``python -m madbench.runner.cli.orphan_child PARENT_PID ARGS...``: the madbench command ``ARGS`` that stops itself
once PARENT_PID is no longer its parent, so that the demo's simulated provider does not outlive a demo killed with
SIGKILL. It lives with the command line (above the runner), which it calls."""

import sys
import threading

from madbench.runner.cli import main
from madbench.runner.sim_process import stop_when_orphaned

if __name__ == "__main__":
    threading.Thread(target=stop_when_orphaned, args=(int(sys.argv[1]),), daemon=True).start()
    sys.exit(main(sys.argv[2:]))
