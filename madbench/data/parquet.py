"""Reading a Parquet file a user points madbench at: one clear error when it is not one."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

from madbench.data.errors import InputError


def read_parquet(path: str | Path) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise InputError(p, "file not found", "check the path")
    try:
        return pd.read_parquet(p)
    except (pa.ArrowInvalid, OSError) as exc:  # a truncated, corrupt or non-Parquet file
        raise InputError(p, f"not a readable Parquet file ({str(exc).splitlines()[0][:200]})",
                         "regenerate it (for a batch's tables: run the same `madbench run` again, which rebuilds them "
                         "from the per-run parts)") from None
