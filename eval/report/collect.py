"""Read a results directory into what the report shows: tables, per-round series and trace digests.

A trace digest keeps what a reader needs to follow one run (memo, each phase's
output, CRIT scores with reasons, interventions, final allocation against the
baselines) and drops what only the machinery needs (prompt hashes, call events,
the argument copies inside CRIT tasks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from madbench.data.errors import InputError
from madbench.debate.events import (
    RCA,
    AnyEvent,
    Backtest,
    BlindMap,
    ControllerStep,
    Crit,
    Divergence,
    EarlyStop,
    Final,
    Intervention,
    InterventionCheck,
    MemoShown,
    RunEnd,
    Turn,
    last_attempt,
)
from madbench.results import ResultsDir


@dataclass
class ReportData:
    root: Path
    batch: str
    runs: pd.DataFrame
    rounds: pd.DataFrame
    calls: pd.DataFrame
    divergence: pd.DataFrame  # run_id, config, round, phase, jsd, cash_spread
    digests: list[dict] = field(default_factory=list)
    memos: dict[str, str] = field(default_factory=dict)  # memo sha256 → text
    traces_missing: int = 0


def _table(results: ResultsDir, name: str) -> pd.DataFrame:
    """A table the batch may not have written (copied results can hold runs.parquet alone): empty then."""
    return results.table(name) if results.unfinished or results.dirs.table(name).exists() else pd.DataFrame()


def digest(events: list[AnyEvent], row: dict) -> tuple[dict, str | None, str | None]:
    """(digest, memo sha, memo text) for one run's last attempt."""
    out = {"run_id": row["run_id"], "config": row["config"], "scenario_id": row["scenario_id"], "status": row["status"],
           "error": row.get("error"), "replicate": row.get("replicate"), "turns": [], "crit": [], "interventions": [],
           "controller": [], "divergence": [], "final": None, "backtest": None, "memo": None, "blind": None}
    memo_sha = memo_text = None
    for e in events:
        if isinstance(e, MemoShown):
            memo_sha, memo_text = e.sha256, e.text
            out["memo"] = {"sha256": e.sha256, "as_of": e.as_of, "n_items": e.n_items}
        elif isinstance(e, Turn):
            out["turns"].append(e.model_dump(mode="json", include={"round", "phase", "label", "agent", "role", "model", "is_llm",
                                                                    "output", "weights", "policy_notes"}))
        elif isinstance(e, Crit):
            s = e.score.model_dump(mode="json")
            out["crit"].append({"round": e.round, "agent": e.agent, "label": e.label, "rho": s["rho"], "scorer": s["scorer"],
                                "scores": s["scores"], "explanations": s["explanations"], "clips": s["clips"],
                                "diagnostics": s["diagnostics"], "audit": e.audit})
        elif isinstance(e, (Intervention, InterventionCheck, RCA, EarlyStop)):
            out["interventions"].append(e.model_dump(mode="json", exclude={"prev", "seq", "t"}, exclude_none=True))
        elif isinstance(e, ControllerStep):
            out["controller"].append({"round": e.round, **e.step})
        elif isinstance(e, Divergence):
            out["divergence"].append(e.model_dump(mode="json", include={"round", "phase", "jsd", "cash_spread"}))
        elif isinstance(e, BlindMap):  # pseudonym → ticker, for the explorer's allocations
            out["blind"] = {p: t for t, p in e.mapping.items()}
        elif isinstance(e, Final):
            out["final"] = e.model_dump(mode="json", include={"weights", "cash", "method", "notes"})
        elif isinstance(e, Backtest):
            out["backtest"] = e.model_dump(mode="json", include={"metrics", "baselines"})
        elif isinstance(e, RunEnd) and e.status == "failed":
            out["error"] = e.error
    return out, memo_sha, memo_text


def load_report_data(root: str | Path, max_traces: int | None = None) -> ReportData:
    root = Path(root)
    results = ResultsDir(root)
    if not results.unfinished and not results.dirs.table("runs").exists():  # an unfinished one: its committed parts
        raise InputError(str(root), "holds no runs.parquet", "give a results directory written by `madbench run`")
    runs = results.runs
    batch = results.manifest.spec["name"] if results.manifest is not None else root.name
    data = ReportData(root, batch, runs, _table(results, "rounds"), _table(results, "calls"), pd.DataFrame())
    series = []
    for i, row in enumerate(runs.to_dict("records")):
        history = results.trace(row["run_id"])
        if history is None:
            data.traces_missing += 1
            continue
        events = last_attempt(history)
        d, sha, text = digest(events, row)
        series += [{"run_id": row["run_id"], "config": row["config"], **x} for x in d["divergence"]]
        if max_traces is None or i < max_traces:
            if sha and text:
                data.memos.setdefault(sha, text)
            data.digests.append(d)
    data.divergence = pd.DataFrame(series, columns=["run_id", "config", "round", "phase", "jsd", "cash_spread"])
    return data
