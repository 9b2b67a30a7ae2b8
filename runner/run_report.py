"""What one unit of a job (a run of `madbench run`, a run graded again by `madbench rescore`) reports when it settles:
the dispatch loop acts on its status (runner/dispatch.py), the progress display counts it (runner/progress.py)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class Status(StrEnum):
    OK = "ok"
    FAILED = "failed"
    #: Not run: the batch's budget is reached. The run stays pending, and no attempt of it is counted.
    BUDGET_REACHED = "budget_reached"


class RunReport(BaseModel):
    run_id: str
    status: Status
    error: str | None = None
    #: The attempt's calls, tokens and cost (``Totals``), for the progress display.
    totals: dict[str, Any] = Field(default_factory=dict)
    #: The Ray node that ran it; None when the run never reached an actor's answer (its actor raised).
    node_id: str | None = None
    wall_s: float | None = None
