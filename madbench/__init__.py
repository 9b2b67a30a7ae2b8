"""madbench: a batch runner for multi-agent LLM debate experiments on portfolio allocation."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

#: The folders the design keeps at the top of the repository, imported as ``madbench.<name>``.
CHECKOUT_PACKAGES = ("runner", "debate", "scoring", "eval")


def _checkout_root() -> Path | None:
    """The repository this package sits in, when it runs from a checkout rather than an installed wheel."""
    root = Path(__file__).resolve().parent.parent
    is_checkout = (root / "pyproject.toml").is_file() and all((root / n / "__init__.py").is_file() for n in CHECKOUT_PACKAGES)
    return root if is_checkout else None


# A wheel installs runner/ as madbench/runner/. A checkout on PYTHONPATH (a Ray working_dir upload, a node that runs
# the checkout uninstalled) has it beside this folder: look there too, so madbench.runner imports either way.
if (_root := _checkout_root()) is not None and str(_root) not in __path__:
    __path__.append(str(_root))


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
