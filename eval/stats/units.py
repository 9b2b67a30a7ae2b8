"""The unit of inference is the scenario: replicates of one (config, scenario) are averaged before any test.

Replicates of a scenario share its market, its data and its prompts; they differ only in sampling noise, so
counting them as scenarios inflates n and shrinks every p-value. For a config c and scenario s with r_{c,s}
finished replicates x_{c,s,1..r}:

  scenario mean        x̄_{c,s} = (1/r_{c,s}) · Σ_j x_{c,s,j}          (the finite values only)
  within-scenario SD   w_c = mean over the scenarios with r_{c,s} ≥ 2 of SD_j(x_{c,s,j})   (ddof = 1)

Summaries, paired tests, beats-1/N, correlations, regressions and power all read the scenario means; ``w_c``
is reported beside them so that the replicate noise stays visible without being counted as evidence.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SCENARIO = "scenario_id"
#: The column scenarios are clustered by (the quarter invested in): scenarios of one quarter share its market.
QUARTER = "invest_quarter"


def replicated(runs: pd.DataFrame) -> bool:
    """Whether some (config, scenario) has more than one run."""
    return "replicate" in runs.columns and bool(runs.groupby(["config", SCENARIO], sort=False).size().gt(1).any())


def scenario_means(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (config, scenario): numeric columns averaged over its replicates (NaN skipped), ``n_replicates``
    the rows averaged, every other column's first value (they describe the scenario or the config, e.g. its
    quarter or batch). ``runs``: finished runs only (``frame.ok_runs``)."""
    keys = ["config", SCENARIO]
    numeric = [c for c in runs.columns if c not in keys and c != "replicate" and pd.api.types.is_numeric_dtype(runs[c])
               and not pd.api.types.is_bool_dtype(runs[c])]
    other = [c for c in runs.columns if c not in keys and c != "replicate" and c not in numeric]
    grouped = runs.groupby(keys, sort=False)
    out = grouped[numeric].mean() if numeric else pd.DataFrame(index=grouped.size().index)
    if other:
        out = out.join(grouped[other].first())
    out["n_replicates"] = grouped.size()
    return out.reset_index()


def within_sd(values: pd.Series, scenarios: pd.Series) -> float:
    """w = mean over scenarios with at least 2 finite replicates of their SD (ddof = 1); NaN when none has two."""
    frame = pd.DataFrame({"x": values.astype(float).to_numpy(), "s": scenarios.to_numpy()}).dropna()
    sd = frame.groupby("s", sort=False)["x"].std(ddof=1).dropna()
    return float(sd.mean()) if len(sd) else float("nan")


def replicate_counts(runs: pd.DataFrame) -> np.ndarray:
    """Finished runs per (config, scenario)."""
    return runs.groupby(["config", SCENARIO], sort=False).size().to_numpy()
