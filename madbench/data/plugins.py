"""Plug-ins from a researcher's own code: a protocol, a scorer or a run metric named by a registered name, an import
path (``my_lab.jury:Jury``) or an installed package's entry point.

One loader for the three kinds, so that each resolves names the same way and fails the same way: one
``InputError`` naming the file and field that named it. A module named by an import path is looked for on
``sys.path`` and then in ``search`` (the folder of the file that names it), which is put on ``sys.path`` for the
process; ``code_roots`` lists every folder a plug-in was imported from, which the runner puts on its Ray workers'
``PYTHONPATH`` so that they import the same module.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path

from madbench.data.errors import InputError

#: Folders plug-in modules were imported from, in the order first seen (what a Ray worker needs on its path).
_ROOTS: list[Path] = []


def is_import_path(name: str) -> bool:
    """``module:attribute`` (the form entry points use), as opposed to a registered name."""
    return ":" in name


def _module_root(module_name: str, file: str | None) -> Path | None:
    """The ``sys.path`` entry a module was found under: its file's folder, one level up per dot of its name (a
    package's ``__init__.py`` one more)."""
    if file is None:
        return None
    path = Path(file).resolve().parent
    depth = module_name.count(".") + (Path(file).name == "__init__.py")
    return path.parents[depth - 1] if depth else path


def import_object(target: str, where: str, field: str, search: Path | None = None, user_code: bool = True) -> object:
    """The object ``module:attribute`` (dotted attributes allowed) names; ``search``: a folder to look in when the
    module is not importable already; ``user_code``: its folder goes into ``code_roots``. An ``InputError`` naming
    ``where`` and ``field`` when it cannot be found."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr or not all(p.isidentifier() for p in [*module_name.split("."), *attr.split(".")]):
        raise InputError(where, f"{field}: {target!r} is not an import path", "write module:Name (e.g. jury:Jury, "
                         "my_lab.jury:Jury), the module on the Python path or in this file's folder")
    if importlib.util.find_spec(module_name.split(".")[0]) is None and search is not None:
        folder = str(search.resolve())
        if folder not in sys.path:
            sys.path.insert(0, folder)
        importlib.invalidate_caches()
    if importlib.util.find_spec(module_name.split(".")[0]) is None:
        looked = f" or in {search}" if search is not None else ""
        raise InputError(where, f"{field}: no module {module_name!r} on the Python path{looked}",
                         f"put {module_name.replace('.', '/')}.py beside this file, or install the package that has it")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:  # the named module itself (a missing import inside it keeps its traceback)
        if exc.name is None or not module_name.startswith(exc.name):
            raise
        raise InputError(where, f"{field}: no module {exc.name!r} (of {module_name})", "fix the import path") from None
    root = _module_root(module_name, getattr(module, "__file__", None)) if user_code else None
    if root is not None and root not in _ROOTS:
        _ROOTS.append(root)
    obj: object = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(where, f"{field}: module {module_name} ({getattr(module, '__file__', '?')}) has no "
                             f"{attr!r}", f"define {attr} there, or fix the name")
        obj = getattr(obj, part)
    return obj


def resolve(name: str, builtin: Mapping[str, str], group: str, where: str, field: str,
            search: Path | None = None) -> object:
    """What ``name`` names: a key of ``builtin`` (name → import path), an import path, or an entry point of
    ``group`` (an installed package's)."""
    if is_import_path(name):
        return import_object(name, where, field, search)
    if name in builtin:
        return import_object(builtin[name], where, field, user_code=False)
    found = [ep for ep in entry_points(group=group) if ep.name == name]
    if found:  # an installed package: its workers import it as installed
        return import_object(found[0].value, where, field, user_code=False)
    installed = sorted(ep.name for ep in entry_points(group=group))
    raise InputError(where, f"{field}: unknown {group.split('.')[-1][:-1]} {name!r}",
                     f"use one of: {', '.join([*builtin, *installed])}; or an import path module:Name")


def code_roots() -> list[Path]:
    """Every folder a plug-in module named by an import path was imported from in this process."""
    return list(_ROOTS)
