"""Writing a pack: all tables into a temporary sibling directory, then one rename.

Either the whole pack appears at ``out`` or nothing does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from madbench.data.atomic import dir_mode
from madbench.data.errors import InputError
from madbench.data.market.table_specs import ALL_TABLES


def write_pack(out: str | Path, tables: dict[str, pd.DataFrame], readme: str | None = None) -> Path:
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise InputError(out, "output directory exists and is not empty", "choose a new --out directory or remove this one")
    unknown = sorted(set(tables) - set(ALL_TABLES))
    if unknown:
        raise ValueError(f"not pack tables: {unknown}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for name, df in tables.items():
            df.to_parquet(tmp / f"{name}.parquet", index=False)
        if readme:
            (tmp / "README.md").write_text(readme, encoding="utf-8")
        os.chmod(tmp, dir_mode())  # mkdtemp makes it 0700; a pack is shared like any result
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
