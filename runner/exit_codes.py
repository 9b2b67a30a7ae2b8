"""The exit statuses of `madbench` (what ``madbench.run`` reports as ``BatchRun.exit_status`` too)."""

#: Some runs of a batch failed (their reasons are printed, with the command that retries them).
EXIT_RUNS_FAILED = 1
#: Bad input (a missing file, a malformed value, a preflight problem): one line on stderr per problem.
EXIT_INPUT = 2
#: The disk filled up; committed results are intact and the same command resumes.
EXIT_DISK_FULL = 3
#: Ray could not be started (or joined): nothing of the batch ran; the same command starts it when Ray can.
EXIT_NO_RAY = 4
#: Interrupted (Ctrl-C) with runs still pending; committed runs are kept and the same command resumes.
EXIT_INTERRUPTED = 130
