"""madbench: a batch runner for multi-agent LLM debate experiments on portfolio allocation."""

from __future__ import annotations

from pathlib import Path

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
