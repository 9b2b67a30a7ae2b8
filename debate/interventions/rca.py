"""RCA consistency retries: a judge checks that a turn follows from its own reasoning; on failure the
turn is retried with feedback whose tone escalates with β, and the last escalation reframes the task
as an optimisation problem.

Hook: ``after_revision`` — every revise turn, including the re-revisions other interventions ask for, is
checked and retried up to ``max_retries`` times.

Revise turns only. The paper had a judge for every turn type but found RCA "most promising ... when applied
to the revise phase", and describes only that one (paper §2.4, §3.4.1; PAPER_NOTES §3 "RCA consistency
judge"). A proposal check would need a retry with feedback that the propose prompt does not show, so
``phases: [propose]`` is rejected when the config is read rather than accepted and never run.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from madbench.debate.events import Intervention
from madbench.debate.interventions.hooks import Debate, RevisionRequest, fired
from madbench.debate.validation import Validated

OPTIMISATION_FRAMING = ("Treat this as an optimisation problem: choose weights that maximise your expected "
                        "risk-adjusted return given only the evidence you cited, subject to the constraints, "
                        "and make every claim and every critique response consistent with those weights.")


#: Its place in a protocol's call plan (``madbench.debate.protocols.plan``): the phase of its judge's check, and the
#: rate (a field of the estimate's ``Rates``) at which a check fails.
CHECK_PHASE = "rca"
FIRING_RATES = ("rca_fail",)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    #: The turn types checked: only ``revise`` is implemented (see the module docstring).
    phases: list[Literal["propose", "revise"]] = Field(default_factory=lambda: list[Literal["propose", "revise"]](["revise"]))
    max_retries: int = Field(2, ge=1, le=5)

    @field_validator("phases")
    @classmethod
    def _revise_only(cls, phases: list[str]) -> list[str]:
        if phases != ["revise"]:
            raise ValueError(f"{phases} is not supported: RCA checks revise turns only (proposals are not checked, as in the "
                             "paper's experiments); write phases: [revise] or leave phases out")
        return phases


def feedback(level: int, beta: float, judge_feedback: str, p: Params) -> str:
    """Escalating feedback: level 1..max_retries; the tone sharpens with β; the last level reframes."""
    if level >= p.max_retries:
        return f"{judge_feedback}\n{OPTIMISATION_FRAMING}"
    tone = ("Please reconsider" if beta < 0.34 else "This is inconsistent; fix it" if beta < 0.67
            else "Your answer contradicts its own reasoning. Rewrite it so that it does not")
    return f"{tone}: {judge_feedback}"


async def after_revision(debate: Debate, p: Params, request: RevisionRequest, out: Validated) -> Validated:
    """Check the revision with the RCA judge; retry it with escalating feedback until it is consistent."""
    a, t = request.agent, request.round
    before, received = debate.current[a.agent_id].value, debate.received[a.agent_id]
    for level in range(1, p.max_retries + 1):
        verdict = await debate.ctx.rca(a, "revise", t, before, out.value, received)
        if verdict.ok:
            return out
        fb = feedback(level, debate.beta, verdict.feedback or verdict.reason, p)
        record = {"name": "rca", "round": t, "agent": a.agent_id, "level": level,
                  "verdict": verdict.verdict, "reason": verdict.reason}
        fired(debate, record, "retry revise with feedback", feedback=fb)
        out = await debate.ask_revision(request.with_nudge(fb, f"{request.label}:rca{level}"))
    final = await debate.ctx.rca(a, "revise", t, before, out.value, received)
    if not final.ok:
        debate.ctx.trace.write(Intervention(name="rca", round=t, agent=a.agent_id, level=p.max_retries + 1,
                                            verdict=final.verdict, reason=final.reason,
                                            action="kept last revision (retries exhausted)"))
    return out
