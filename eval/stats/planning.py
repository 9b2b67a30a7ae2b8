"""Planning the next study from this one: ``madbench stats --power``. For each tested comparison, the scenarios a
paired design needs to detect a safeguarded effect at the target powers, with the scenarios' clustering by quarter
taken from the data (``power.plan_from_pilot``: safeguard effect, Kish design effect from the ICC of the
per-scenario differences within quarters, and the quarter-clustered t's df, the test the comparison runs). Replicates enter through the scenario means: the plan keeps the pilot's
replicates per scenario."""

from __future__ import annotations

import pandas as pd

from madbench.eval.stats.paired import PairedComparison, scenario_differences
from madbench.eval.stats.power import plan_from_pilot
from madbench.eval.stats.units import QUARTER, SCENARIO


def plan_pairs(runs: pd.DataFrame, pairs: list[PairedComparison], powers: list[float], alpha: float = 0.05) -> list[dict]:
    """One planning row per tested comparison (``runs``: finished runs), with a ``line`` to print."""
    quarter_of = runs.groupby(SCENARIO, sort=False)[QUARTER].first() if QUARTER in runs.columns else None
    rows = []
    for comp in pairs:
        if comp.p != comp.p:  # not tested: nothing to plan from
            continue
        d = scenario_differences(runs, comp.a, comp.b, comp.metric)
        quarters = quarter_of.reindex(d.index).to_numpy() if quarter_of is not None else None
        plan = plan_from_pilot(d.to_numpy(), quarters, powers, alpha)
        rows.append({"metric": comp.metric, "a": comp.a, "b": comp.b, **plan, "line": plan_line(comp, plan)})
    return rows


def plan_line(comp: PairedComparison, plan: dict) -> str:
    head = (f"{comp.metric}, {comp.a} − {comp.b}: pilot d̄ = {plan['diff']:+.4g} (SD {plan['sd']:.4g}) over {plan['n']} scenarios")
    if plan["note"]:
        return f"{head}; {plan['note']}"
    cluster = ("no quarters to cluster on: scenarios taken as independent (deff = 1), planned for the ordinary paired t"
               if plan["test"] == "paired t" else
               f"{plan['quarters']} quarters, {plan['m']:.2f} scenarios each, ICC {plan['icc']:.3f}, Kish design effect "
               f"{plan['deff']:.2f}; planned for the test that is run, the quarter-clustered t (CR2), at the "
               "Satterthwaite df of the planned quarters (G − 1 for G equal quarters)")
    needs = "; ".join(f"power {r['power']:.0%}: {r['scenarios']} scenarios"
                      + (f" ({r['quarters']} quarters, df {r['df']:.0f})" if r["quarters"] else "")
                      for r in plan["needed"])
    return (f"{head}; planned for the safeguard effect {plan['effect']:.4g} (the {plan['safeguard_confidence']:.0%} interval's "
            f"bound nearer 0; Perugini et al. 2014); {cluster}. Needs {needs}. This pilot's power for that effect: "
            f"{plan['power_at_pilot_n']:.0%}.")
