"""Shared machinery of the staged protocols (adversarial, desks, tradingagents).

A stage is one role answering one pydantic schema from a rendered prompt. The
prompt sees only what the stage is given (a slice of the memo and earlier
outputs); the rule-based answerer and an LLM get the same StageTask, so a
stage behaves the same on both. Every answer is validated (schema, universe,
evidence IDs the stage could see, allocation constraints) and retried with
the error as feedback by the gateway; every turn is written to the trace as
a ``turn`` event, like the paper protocol's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from madbench.data.errors import InputError
from madbench.data.memo import PRICE_FEATURE_KEYS, EvidenceItem
from madbench.data.paths import CONFIGS_DIR
from madbench.data.templates import BoundedTemplate, PromptSpec, compile_template, load_yaml_model
from madbench.debate.config import DebateConfig
from madbench.debate.context import RunContext, constraints_text, raise_if
from madbench.debate.events import Turn
from madbench.debate.protocols.protocol import Protocol
from madbench.debate.protocols.registry import protocol_named
from madbench.debate.request_schemas import constrained_schema
from madbench.debate.schemas import Holding, json_schema
from madbench.debate.task import StageTask
from madbench.debate.validation import M, check_allocation, parse_json, schema_outline
from madbench.gateway.phases import CRIT_PHASE, STAGE_PHASE

PROTOCOL_PROMPTS = CONFIGS_DIR / "protocols"

# -- memo slices (the desks' scopes) -------------------------------------------------------------

SENTIMENT = re.compile(r"^(SENT|SVOL|EC\d+)$")
Slice = Literal["fundamentals", "technicals", "sentiment", "macro"]
SLICES: tuple[str, ...] = ("fundamentals", "technicals", "sentiment", "macro")


def slice_of(item_id: str) -> str:
    head, _, field = item_id.partition("-")
    if head == "L1":
        return "macro"
    if field in PRICE_FEATURE_KEYS:
        return "technicals"
    if SENTIMENT.match(field):
        return "sentiment"
    return "fundamentals"


def memo_slice(items: list[EvidenceItem], name: str) -> list[EvidenceItem]:
    return [i for i in items if slice_of(i.id) == name]


def render_items(items: list[EvidenceItem]) -> str:
    """A plain listing of evidence items, grouped by ticker, in memo order."""
    lines = []
    for i in items:
        value = f"{i.value:.4g}" if isinstance(i.value, float) else ("n/a" if i.value is None else str(i.value))
        when = f"; as of {i.as_of}" if i.as_of else ""
        lines.append(f"[{i.id}] {i.label}: {value} {i.unit}{when}")
    return "\n".join(lines) if lines else "(no evidence in this slice)"


# -- the task every stage answerer receives ------------------------------------------------------

# -- prompts -------------------------------------------------------------------------------------

class ProtocolPrompts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int
    stages: dict[str, PromptSpec]


def load_prompts(protocol: str) -> tuple[ProtocolPrompts, dict[str, BoundedTemplate]]:
    """The stage prompts of the protocol a config names ``protocol``, each template compiled."""
    path = protocol_named(protocol).prompt_file()
    if path is None:
        raise InputError(f"protocol {protocol}", "it declares no stage prompts", "set stage_prompts on its class")
    return load_prompt_file(path)


@lru_cache(maxsize=16)
def load_prompt_file(path: Path) -> tuple[ProtocolPrompts, dict[str, BoundedTemplate]]:
    if not path.is_file():
        raise InputError(path, "protocol prompt file not found", "add it, or fix the protocol's stage_prompts")
    prompts = load_yaml_model(path, ProtocolPrompts)
    # a template using what it does not declare would fail only at run time: fail at load
    compiled = {name: compile_template(stage.template, set(stage.variables), f"{path}: stages.{name}.template")
                for name, stage in prompts.stages.items()}
    return prompts, compiled


# -- asking a stage ------------------------------------------------------------------------------

def known_ids_check(answer: BaseModel, allowed: set[str], what: str = "the evidence you were shown") -> list[str]:
    """Every evidence ID anywhere in the answer must be one the stage could see."""
    cited: set[str] = set()

    def walk(v):
        if isinstance(v, BaseModel):
            for name, field_value in v:
                if name == "evidence_ids":
                    cited.update(field_value)
                else:
                    walk(field_value)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
    walk(answer)
    unknown = sorted(cited - allowed)
    return [f"evidence IDs {', '.join(unknown[:8])} are not in {what}; cite only IDs listed there"] if unknown else []


def tickers_check(tickers: list[str], universe: list[str], field: str) -> list[str]:
    outside = sorted(set(tickers) - set(universe))
    return [f"{field}: {', '.join(outside)} not in the universe ({', '.join(universe)})"] if outside else []


async def ask_stage(ctx: RunContext, task: StageTask, schema: type[M], variables: dict[str, Any],
                    check: Callable[[M], list[str]] | None = None, label: str | None = None,
                    allocation: Callable[[M], tuple[list[Holding], float]] | None = None,
                    visible_ids: set[str] | None = None, enums: dict[str, list[str]] | None = None):
    """Render, call, validate (with feedback retries), trace. Returns (answer, weights or None, cash or None)."""
    prompts, compiled = load_prompts(task.protocol)
    if task.stage not in prompts.stages:
        raise InputError(f"protocol {task.protocol} stage prompts", f"no prompt for stage {task.stage!r}", "add it under stages")
    stage = prompts.stages[task.stage]
    supplied = {"universe": ", ".join(task.universe), "constraints": constraints_text(task.constraints),
                "evidence": render_items(task.evidence), "role": task.role, "round": task.round,
                "schema": schema_outline(json_schema(schema)), **variables}
    missing = sorted(set(stage.variables) - set(supplied))
    if missing:
        raise RuntimeError(f"protocol {task.protocol} stage {task.stage}: the engine did not supply {', '.join(missing)} (a bug)")
    user = compiled[task.stage].render(**{k: supplied[k] for k in stage.variables})
    rules = ctx.turn_rules()
    result: dict[str, Any] = {}

    def validate(content: str, spec):
        answer = parse_json(content, schema)
        problems = list(check(answer)) if check else []
        if allocation is not None:
            holdings, cash = allocation(answer)
            problems += tickers_check([h.ticker for h in holdings], task.universe, "allocation")
            if not problems:
                weights, cash_out, notes = check_allocation(holdings, cash, rules, spec.weight_policy or "strict")
                result.update(weights=weights, cash=cash_out, notes=notes)
        raise_if(problems)
        return answer

    c = await ctx.complete(who=task.agent_id, role=task.role, phase=STAGE_PHASE, round_=task.round, system=stage.system,
                            user=user, schema=constrained_schema(schema, task.universe, ctx.memo_ids if visible_ids is None else visible_ids, enums),
                            context=task.model_dump(mode="json"),
                            temperature=ctx.config.temperature, validate=validate, label=label or task.stage)
    answer = c.value
    ctx.trace.write(Turn(agent=task.agent_id, role=task.role, phase=task.stage, round=task.round, label=label or task.stage,
                   output=answer.model_dump(mode="json"), weights=result.get("weights"), cash=result.get("cash"),
                   policy_notes=result.get("notes", []), model=c.model_used, is_llm=c.is_llm))
    return answer, result.get("weights"), result.get("cash")


def record_local(ctx: RunContext, task: StageTask, answer: BaseModel, reason: str) -> None:
    """A stage answered without a model (e.g. a desk with no evidence): traced as such, never passed off as a call."""
    ctx.trace.write(Turn(agent=task.agent_id, role=task.role, phase=task.stage, round=task.round, label=task.stage,
                   output=answer.model_dump(mode="json"), weights=None, cash=None, policy_notes=[reason],
                   model="none (no call)", is_llm=False))


class Staged(Protocol):
    """A shipped staged protocol: its stages' prompts are ``configs/protocols/<name>.yaml``. Staged protocols route
    models by role (tiers such as deep/quick per role); every stage is routed as ``STAGE_PHASE``."""
    prompts = "stages"
    #: Its file's stem under ``configs/protocols``.
    name: ClassVar[str]

    def prompt_file(self) -> Path:
        return PROTOCOL_PROMPTS / f"{self.name}.yaml"

    def routed(self, cfg: DebateConfig) -> set[tuple[str, str]]:
        """Every routed role and the default, at the stage phase and CRIT's: which of its roles a run calls can
        depend on the memo (a desk without evidence makes no call)."""
        roles = {"default"} | set(cfg.models.roles) | {k.split(".")[0] for k in cfg.models.role_phases}
        return {(r, p) for r in roles for p in (STAGE_PHASE, CRIT_PHASE)}
