"""How a checkout used uninstalled imports its top-level folders as ``madbench.runner``, ``madbench.debate``, ...

A wheel installs ``runner/`` as ``madbench/runner/``, and an editable install maps it (setuptools' finder). A
checkout on PYTHONPATH, uninstalled (a Ray ``working_dir`` upload, a node running the checkout, a worktree), has
those folders beside the package: ``madbench/__init__.py`` adds one entry to ``madbench.__path__`` that names them,
and the path hook here answers that entry for exactly those names. The repository itself is never on
``__path__``: that made ``madbench.madbench``, ``madbench.tests``, ... importable and ``pkgutil.walk_packages``
endless.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib.machinery import (
    BYTECODE_SUFFIXES,
    EXTENSION_SUFFIXES,
    SOURCE_SUFFIXES,
    ExtensionFileLoader,
    FileFinder,
    ModuleSpec,
    SourceFileLoader,
    SourcelessFileLoader,
)
from pathlib import Path
from types import ModuleType

#: The folders the design keeps at the top of the repository, imported as ``madbench.<name>``.
CHECKOUT_PACKAGES = ("runner", "debate", "scoring", "eval")
#: ``configs/`` holds data, not code: importable as the namespace package a wheel installs, never walked.
DATA_PACKAGES = ("configs",)
#: The loaders a folder on sys.path gets (the order of importlib's own: an extension, then source, then bytecode).
LOADERS = ((ExtensionFileLoader, EXTENSION_SUFFIXES), (SourceFileLoader, SOURCE_SUFFIXES), (SourcelessFileLoader, BYTECODE_SUFFIXES))
#: The last part of the ``__path__`` entry, under the checkout's root; no file or folder has this name.
ENTRY_NAME = "<madbench checkout packages>"


def checkout_root(package_dir: Path) -> Path | None:
    """The repository ``package_dir`` (the ``madbench`` folder) sits in, when it is a checkout rather than an
    installed wheel."""
    root = package_dir.resolve().parent
    is_checkout = (root / "pyproject.toml").is_file() and all((root / n / "__init__.py").is_file() for n in CHECKOUT_PACKAGES)
    return root if is_checkout else None


class CheckoutPackages:
    """The path hook and finder of one checkout's entry: ``madbench.<name>`` for the names above, from the folders
    of the checkout the entry names (each worktree's own), and nothing else."""

    madbench_checkout = True  # how install() recognises a hook put there by an earlier import of this module

    def __init__(self, entry: str) -> None:
        path = Path(entry)
        if path.name != ENTRY_NAME:
            raise ImportError("not a madbench checkout entry", path=entry)  # a path hook's way to pass on an entry
        self.root = path.parent
        self._folders = FileFinder(str(self.root), *LOADERS)

    def find_spec(self, fullname: str, target: ModuleType | None = None) -> ModuleSpec | None:
        parent, _, name = fullname.rpartition(".")
        if parent != "madbench" or name not in CHECKOUT_PACKAGES + DATA_PACKAGES:
            return None
        return self._folders.find_spec(fullname, target)

    def invalidate_caches(self) -> None:
        self._folders.invalidate_caches()

    def iter_modules(self, prefix: str = "") -> Iterator[tuple[str, bool]]:
        """What ``pkgutil.iter_modules`` lists for this entry: the code packages (so ``walk_packages`` over
        ``madbench.__path__`` reaches ``madbench.runner.*`` as it does in a wheel)."""
        for name in sorted(CHECKOUT_PACKAGES):
            yield prefix + name, True


def install(package_path: list[str], package_dir: Path) -> None:
    """Make ``madbench.runner``, ... import from the checkout ``package_dir`` sits in, if it sits in one."""
    root = checkout_root(package_dir)
    if root is None:
        return
    if not any(getattr(hook, "madbench_checkout", False) for hook in sys.path_hooks):
        sys.path_hooks.insert(0, CheckoutPackages)
    entry = str(root / ENTRY_NAME)
    if entry not in package_path:
        package_path.append(entry)
