"""RCA consistency retries: a judge checks that a turn follows from its own reasoning; on failure the
turn is retried with feedback whose tone escalates with β, and the last escalation reframes the task
as an optimisation problem."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

OPTIMISATION_FRAMING = ("Treat this as an optimisation problem: choose weights that maximise your expected "
                        "risk-adjusted return given only the evidence you cited, subject to the constraints, "
                        "and make every claim and every critique response consistent with those weights.")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    phases: list[Literal["propose", "revise"]] = Field(default_factory=lambda: ["revise"])
    max_retries: int = Field(2, ge=1, le=5)


def feedback(level: int, beta: float, judge_feedback: str, p: Params) -> str:
    """Escalating feedback: level 1..max_retries; the tone sharpens with β; the last level reframes."""
    if level >= p.max_retries:
        return f"{judge_feedback}\n{OPTIMISATION_FRAMING}"
    tone = ("Please reconsider" if beta < 0.34 else "This is inconsistent; fix it" if beta < 0.67
            else "Your answer contradicts its own reasoning. Rewrite it so that it does not")
    return f"{tone}: {judge_feedback}"
