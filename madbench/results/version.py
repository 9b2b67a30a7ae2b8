"""The results format's version: recorded in each manifest, in each trace's ``run_start`` and in each Parquet file.

Results written before it was recorded carry none and are read as this version (their format is the current one).
Bump it when a reader of the current version would misread what is written (a renamed or retyped column, a changed
trace event), and teach the readers the older version.
"""

from __future__ import annotations

from pathlib import Path

from madbench.data.errors import InputError

FORMAT_VERSION = 1


def check_version(version: object, where: str | Path, what: str) -> None:
    """A ``version`` this code reads (this one, or None: written before versions were recorded), else an InputError.
    Only the integer counts: a version written as text ("1") is not one madbench wrote."""
    if version is not None and (type(version) is not int or version != FORMAT_VERSION):
        raise InputError(where, f"{what} is in results format {version!r}; this madbench reads format {FORMAT_VERSION}",
                         "read it with the madbench version that wrote it (the manifest's `versions` names it)")
