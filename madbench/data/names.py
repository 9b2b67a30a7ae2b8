"""Names that become paths: one rule for every name madbench puts into a file or folder name (a batch's name, a debate
config's name, a scenario id, a rescore label, a run id), and one way to build such a path that cannot leave its root.

A name is one plain path component: letters, digits and ``_ . + = -``, not starting with ``.``, ``-``, ``+`` or ``=``
(so never ``.`` or ``..``, never a hidden file, never read as a command-line option), at most ``MAX_NAME_LENGTH``
characters. ``+`` and ``=`` are there for a batch grid's config names (``causal-debate-3+rounds=2``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field

from madbench.data.errors import InputError
from madbench.data.paths import MAX_NAME_LENGTH

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=-]*")
#: The allowed form, as every message about a name says it.
NAME_FORM = (f"letters, digits and _ . + = -, starting with a letter, digit or _, at most {MAX_NAME_LENGTH} "
             "characters (it becomes a file name)")
#: The characters a name may hold: what a generated name (a grid value) keeps, the others becoming ``_``.
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.+=-")


def name_problem(name: object) -> str | None:
    """What is wrong with ``name`` as a name that becomes a path, or None when it is one."""
    if not isinstance(name, str) or not name:
        return f"{name!r} is empty or not text"
    shown = name if len(name) <= 40 else name[:40] + "…"
    if len(name) > MAX_NAME_LENGTH:
        return f"{shown!r} is {len(name):,} characters, over the limit of {MAX_NAME_LENGTH}"
    if "/" in name or "\\" in name or "\0" in name:
        return f"{shown!r} holds a path separator"
    if not _NAME.fullmatch(name):
        return f"{shown!r} is not a plain name"
    return None


def check_name(name: object, where: str | Path, what: str = "name") -> str:
    """``name`` when it is a plain name (``name_problem``), else an ``InputError`` at ``where`` saying the allowed form."""
    problem = name_problem(name)
    if problem is not None:
        raise InputError(where, f"{what} {problem}", f"give a {what} of {NAME_FORM}")
    return name  # type: ignore[return-value]


def _validated(name: str) -> str:
    problem = name_problem(name)
    if problem is not None:
        raise ValueError(f"{problem}: a name is {NAME_FORM}")
    return name


#: A pydantic field holding a name that becomes a path (its length refused first, in pydantic's own words).
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH), AfterValidator(_validated)]


def safe_name_text(text: str) -> str:
    """``text`` with every character a name may not hold replaced by ``_`` (for a name built from values)."""
    return "".join(c if c in NAME_CHARS else "_" for c in text)


def inside(root: str | Path, name: str, where: str | Path, what: str = "name", suffix: str = "") -> Path:
    """``root/<name><suffix>``, refused (an ``InputError`` at ``where``) unless it lies directly inside ``root`` once
    made absolute: every writer of a path built from a name goes through here, so no name (``../../x``, ``/etc/x``)
    sends a write outside the folder it belongs in. Only the path's containment is checked, not ``NAME_FORM``: a name
    read back from results written before the form was enforced still names its own file."""
    root = Path(root)
    path = root / f"{name}{suffix}"
    if (not isinstance(name, str) or name in ("", ".", "..") or any(c in name for c in "/\\\0")
            or Path(os.path.abspath(path)).parent != Path(os.path.abspath(root))):
        raise InputError(where, f"{what} {name!r} would make a path outside {root}", f"give a {what} of {NAME_FORM}")
    return path
