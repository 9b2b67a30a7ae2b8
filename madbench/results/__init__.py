"""A results directory, defined once: its layout, its JSON models, its tables' schemas and its format version.

Every package above it (scoring, eval, runner) finds, writes and reads results only through here.
"""

from madbench.results.checks import check_results_dir
from madbench.results.layout import TABLES, BatchDirs, DebateDirs, ScoreDirs, run_files
from madbench.results.reader import ResultsDir, read_scores
from madbench.results.records import Manifest, ManifestRun, RunResult, read_manifest, read_result, write_manifest
from madbench.results.table_schemas import SPECS, read_table, write_rows
from madbench.results.traces import read_committed_history, read_history
from madbench.results.version import FORMAT_VERSION

__all__ = ["FORMAT_VERSION", "SPECS", "TABLES", "BatchDirs", "DebateDirs", "Manifest", "ManifestRun", "ResultsDir",
           "RunResult", "ScoreDirs", "read_committed_history", "read_history", "read_manifest", "read_result",
           "read_scores", "read_table", "check_results_dir", "run_files", "write_manifest", "write_rows"]
