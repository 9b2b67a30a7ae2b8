"""The deterministic answer to every structured task: ``rules/<name>`` models, the simulated provider.

Debate turns are answered by the rule-based analysts (``madbench.debate.rules``), staged protocols' tasks by their
stage answerer, CRIT and RCA by the rule-based scorers. This table lives here, above both the debate and
the scoring, because it answers for both; the runner hands it to the gateway.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
from collections.abc import Callable

from pydantic import BaseModel

from madbench.debate.envelope import ANSWER_IN
from madbench.debate.protocols import protocol_named
from madbench.debate.protocols.self_consistency import SAMPLE_STRIDE
from madbench.debate.rules import ANALYSTS, respond
from madbench.debate.schemas import BasicProposal, Holding, JudgeDecision, Proposal
from madbench.debate.task import AgentTask, StageTask
from madbench.debate.validation import cap_weights
from madbench.scoring import rca_judge, rules_scorer

#: A sampled task's key (``madbench.debate.protocols.self_consistency.SampledTask``): which draw, at which temperature.
SAMPLE_KEY = "sample"
#: The spread of a rule-based analyst's samples: the standard deviation of the noise on its log-weights per unit
#: of temperature (0.7, the ready configs' temperature, moves a weight by about ×/÷ 1.4 at one sigma).
RULE_SAMPLE_SCALE = 0.5

def answer_stage(context: dict) -> BaseModel:
    """A stage's rule-based answer, as the protocol that asks it declares (``Protocol.rule_answers``)."""
    task = StageTask.model_validate(context)
    answers = protocol_named(task.protocol).rule_answers
    if task.stage not in answers:
        raise KeyError(f"no rule-based answer for protocol {task.protocol!r} stage {task.stage!r} (it declares: "
                       f"{', '.join(answers) or 'none'})")
    return answers[task.stage](task)


def _analyst_answer(name: str, ctx: dict) -> BaseModel:
    return respond(name, AgentTask.model_validate(ctx))


HANDLERS: dict[str, Callable[[dict], BaseModel]] = {
    **{name: functools.partial(_analyst_answer, name) for name in [*ANALYSTS, "judge"]},
    "crit": lambda ctx: rules_scorer.score(rules_scorer.CritTask.model_validate(ctx)),
    "rca": lambda ctx: rca_judge.rules_verdict(rca_judge.RCATask.model_validate(ctx)),
    "stage": answer_stage,
}


def sampled_answer(name: str, context: dict) -> BaseModel:
    """One draw of a deterministic analyst, for a task that names its sample (self-consistency).

    The analyst's own answer, each held weight times exp(σ·z) with σ = ``RULE_SAMPLE_SCALE`` × temperature and
    z ~ N(0, 1) from a generator seeded by the whole task (its sample index included: the same draw every time),
    rescaled to the same invested total and capped at max_weight. The held tickers, claims and cash stay the
    analyst's, so the draw is as valid as the answer; at temperature 0 every draw is the answer itself. Sample 0
    (index below ``SAMPLE_STRIDE``: replicate k's first) is the answer itself at any temperature: it is the single
    agent's own request (one cache key), so it must be the single agent's answer too.
    """
    task = {k: v for k, v in context.items() if k != SAMPLE_KEY}
    out = respond(name, AgentTask.model_validate(task))
    if not isinstance(out, Proposal | BasicProposal | JudgeDecision):
        raise TypeError(f"rules/{name} answered a {type(out).__name__}: no allocation to draw a sample of")
    sigma = RULE_SAMPLE_SCALE * float(context[SAMPLE_KEY]["temperature"])
    held = {h.ticker: h.weight for h in out.allocation if h.weight > 0}
    if sigma == 0 or not held or int(context[SAMPLE_KEY]["index"]) < SAMPLE_STRIDE:
        return out
    seed = int(hashlib.sha256(json.dumps(context, sort_keys=True).encode()).hexdigest()[:16], 16)
    rng = random.Random(seed)
    drawn = {t: w * math.exp(sigma * rng.gauss(0.0, 1.0)) for t, w in sorted(held.items())}
    invested, total = sum(held.values()), sum(drawn.values())
    capped = cap_weights({t: w / total * invested for t, w in drawn.items()}, task["constraints"]["max_weight"])
    rounded = {t: round(w, 6) for t, w in capped.items()}
    top = max(rounded, key=lambda t: (rounded[t], t))  # the rounding residue on the largest holding
    rounded[top] = round(rounded[top] + invested - sum(rounded.values()), 6)
    return out.model_copy(update={"allocation": [Holding(ticker=h.ticker, weight=rounded.get(h.ticker, h.weight))
                                                 for h in out.allocation]})


def answer(name: str, context: dict) -> BaseModel:
    """Answer ``context`` as ``rules/<name>``; a staged protocol's task goes to the stage answerer, whatever the role,
    and a sampled task to ``sampled_answer``."""
    if "stage" in context:
        name = "stage"
    elif SAMPLE_KEY in context:
        return sampled_answer(name, context)
    if name not in HANDLERS:
        raise KeyError(f"known: {', '.join('rules/' + n for n in HANDLERS)}")
    return HANDLERS[name](context)


def handler_for_context(context: dict) -> str:
    """Which rule-based model answers a structured task, from the task's own fields."""
    if "stage" in context:
        return "stage"
    if "argument" in context:
        return "crit"
    if "after" in context:
        return "rca"
    return "judge" if context.get("phase") == "judge" else context["role"]


def answer_for_context(context: dict) -> str:
    """The JSON answer to a task whose model is not named (the simulated provider's case), as the phase's own
    object: ``madbench.debate.envelope.as_asked`` puts it in the envelope when the task asks for one."""
    context = {k: v for k, v in context.items() if k != ANSWER_IN}
    return answer(handler_for_context(context), context).model_dump_json()
