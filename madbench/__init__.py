"""madbench: a batch runner for multi-agent LLM debate experiments on portfolio allocation."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from madbench.checkout import install

# A wheel installs runner/ as madbench/runner/; a checkout on PYTHONPATH (a Ray working_dir upload, a node that runs
# the checkout uninstalled) has it beside this folder: one __path__ entry names those folders (madbench.checkout).
install(__path__, Path(__file__).parent)


# The public API, imported on first use (PEP 562): `import madbench.data.paths` and `madbench --help` stay free of
# Ray and pandas, which the API's modules import.
__all__ = ["run", "estimate", "open_results", "runs_df", "study_stats", "BatchSpec", "BatchRun", "BatchEstimate", "Estimate",
           "Spend", "Results", "BatchStatus", "FailureGroup", "RunOptions", "InputError", "__version__"]
#: Where each name of the API is defined.
_HOMES = {"madbench.runner.api": ("run", "estimate", "open_results", "BatchRun", "BatchEstimate", "Estimate"),
          "madbench.runner.batch": ("BatchSpec",), "madbench.runner.api_records": ("Spend",),
          "madbench.runner.batch_view": ("Results", "BatchStatus", "FailureGroup"),
          "madbench.runner.study_dirs": ("runs_df", "study_stats"),
          "madbench.runner.options": ("RunOptions",), "madbench.data.errors": ("InputError",)}
_LAZY = {name: module for module, names in _HOMES.items() for name in names}

if TYPE_CHECKING:
    from madbench.data.errors import InputError
    from madbench.runner.api import BatchEstimate, BatchRun, Estimate, estimate, open_results, run
    from madbench.runner.api_records import Spend
    from madbench.runner.batch import BatchSpec
    from madbench.runner.batch_view import BatchStatus, FailureGroup, Results
    from madbench.runner.options import RunOptions
    from madbench.runner.study_dirs import runs_df, study_stats

    __version__: str


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed distribution's, read when asked (as `madbench --version` does)
        return importlib.import_module("madbench.runner.cli").version()
    if name not in _LAZY:
        raise AttributeError(f"module 'madbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # once imported, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
