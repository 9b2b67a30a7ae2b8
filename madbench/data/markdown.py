"""Plain Markdown tables from DataFrames (no tabulate dependency)."""

from __future__ import annotations

import math

import pandas as pd


def markdown_table(df: pd.DataFrame, digits: int = 3) -> str:
    def cell(v: object) -> str:
        if isinstance(v, float):
            return "n/a" if math.isnan(v) else f"{v:.{digits}f}"
        return str(v)
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)
