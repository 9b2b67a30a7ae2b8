"""Rule-based analysts (``rules/<role>`` models): deterministic role heuristics, no LLM.

They answer the same AgentTask with the same schemas as an LLM, citing real
memo IDs, and are labelled non-LLM wherever they appear. Adding one is one
module plus one entry here.
"""

from __future__ import annotations

from pydantic import BaseModel

from madbench.debate.rules.analyst import RuleAnalyst
from madbench.debate.rules.devils_advocate import DevilsAdvocate
from madbench.debate.rules.judge import judge
from madbench.debate.rules.macro import MacroAnalyst
from madbench.debate.rules.risk import RiskAnalyst
from madbench.debate.rules.sentiment import SentimentAnalyst
from madbench.debate.rules.technical import TechnicalAnalyst
from madbench.debate.rules.value import ValueAnalyst
from madbench.debate.task import AgentTask

ANALYSTS: dict[str, type[RuleAnalyst]] = {
    "macro": MacroAnalyst,
    "value": ValueAnalyst,
    "risk": RiskAnalyst,
    "technical": TechnicalAnalyst,
    "sentiment": SentimentAnalyst,
    "devils_advocate": DevilsAdvocate,
}


def respond(name: str, task: AgentTask) -> BaseModel:
    """Answer ``task`` as ``rules/<name>``. ``judge`` aggregates; a role name answers its own phases."""
    if name == "judge" or task.phase == "judge":
        return judge(task)
    if name not in ANALYSTS:
        raise KeyError(f"no rule-based analyst {name!r}; known: judge, {', '.join(ANALYSTS)}")
    analyst = ANALYSTS[name]()
    return getattr(analyst, task.phase)(task)
