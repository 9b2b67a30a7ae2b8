"""Domain checks on a parsed turn, beyond what a JSON schema can say.

Each check raises ``OutputInvalid`` with a message written for the model: it
goes back verbatim as retry feedback, and into the trace when retries run out.
The declared ``normalize`` weight policy is the only repair, and every repair
it makes is returned as a note for the trace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from madbench.data.errors import format_validation_error
from madbench.data.scenario import Constraints
from madbench.debate.schemas import (
    BasicCritique,
    BasicProposal,
    Critique,
    Holding,
    JudgeDecision,
    Proposal,
    Tier,
    critique_targets,
    schema_for,
    weights_of,
)
from madbench.gateway.errors import OutputInvalid

SUM_TOL = 1e-3


@dataclass
class TurnRules:
    universe: list[str]
    constraints: Constraints
    evidence_ids: set[str]
    #: agent_id → that agent's claim ids, for critique targets (an empty set: a claim-less agent, whose
    #: allocation is the target).
    peer_claims: dict[str, set[str]] = field(default_factory=dict)
    require_known_evidence: bool = True
    #: (from_agent, target_claim) of every critique received, for the revise schema; None outside revise.
    #: Not enforced: an ignored critique is a reasoning failure that CRIT (P3) and the RCA judge measure.
    owed_responses: list[tuple[str, str]] | None = None
    #: The answering agent's prompt tier, which picks the output schema (``madbench.debate.schemas.schema_for``).
    tier: Tier = "causal"


@dataclass
class Validated:
    value: BaseModel
    weights: dict[str, float] | None
    notes: list[str]

    @property
    def held_weights(self) -> dict[str, float]:
        """The weights of an answer that allocates (a proposal, a revision, a judge's decision)."""
        if self.weights is None:
            raise TypeError(f"a {type(self.value).__name__} answer holds no allocation (a bug to ask for one)")
        return self.weights

    @property
    def cash_weight(self) -> float:
        """The cash of an answer that allocates."""
        cash = getattr(self.value, "cash_weight", None)
        if not isinstance(cash, float | int):
            raise TypeError(f"a {type(self.value).__name__} answer holds no cash weight (a bug to ask for one)")
        return float(cash)


def decode_answer(content: str) -> Any:
    """An answer's JSON, or ``OutputInvalid`` saying where it breaks (fed back to the model)."""
    try:
        return json.loads(content.strip(), strict=False)  # control characters inside strings are tolerated
    except json.JSONDecodeError as exc:
        raise OutputInvalid(f"the answer is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


#: An answer's model: what parse_json (and a protocol stage's ask) returns is the model it was given.
M = TypeVar("M", bound=BaseModel)


def parse_json(content: str, model: type[M]) -> M:
    """Strict parse: one JSON object that satisfies the model, nothing repaired."""
    data = decode_answer(content)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise OutputInvalid(f"the JSON does not match the {model.__name__} schema: {format_validation_error(exc)}") from None


def check_allocation(holdings: list[Holding], cash: float, rules: TurnRules, policy: str) -> tuple[dict[str, float], float, list[str]]:
    """Full-universe weights and cash that satisfy the constraints, and the notes of any declared repair."""
    c, universe, notes = rules.constraints, rules.universe, []
    outside = sorted({h.ticker for h in holdings} - set(universe))
    if outside:
        raise OutputInvalid(f"tickers outside the universe: {', '.join(outside)}. Use only: {', '.join(universe)}")
    seen = [h.ticker for h in holdings]
    dupes = sorted({t for t in seen if seen.count(t) > 1})
    if dupes:
        raise OutputInvalid(f"tickers listed more than once: {', '.join(dupes)}")
    weights = weights_of(holdings)
    missing = [t for t in universe if t not in weights]
    if not c.allow_cash and cash > 0:
        if policy != "normalize":
            raise OutputInvalid(f"cash_weight must be 0: this scenario is fully invested (got {cash:g})")
        notes.append(f"normalize: dropped cash_weight {cash:g} (fully invested scenario)")
        cash = 0.0
    if missing:
        if policy != "normalize":
            raise OutputInvalid(f"every ticker must be listed (weight 0 allowed); missing: {', '.join(missing)}")
        notes.append(f"normalize: set missing tickers to 0: {', '.join(missing)}")
    full = {t: float(weights.get(t, 0.0)) for t in universe}
    total = sum(full.values()) + cash
    if abs(total - 1.0) > SUM_TOL:
        if policy != "normalize" or total <= 0:
            raise OutputInvalid(f"weights plus cash_weight must sum to 1, but sum to {total:.4f}")
        notes.append(f"normalize: rescaled weights summing to {total:.4f} to 1")
        full = {t: w / total for t, w in full.items()}
        cash /= total
    over = {t: w for t, w in full.items() if w > c.max_weight + SUM_TOL}
    if over:
        if policy != "normalize":
            raise OutputInvalid(f"weights above max_weight {c.max_weight:g}: "
                                + ", ".join(f"{t}={w:.3f}" for t, w in over.items()))
        held_now = [t for t, w in full.items() if w > 0]
        if len(held_now) * c.max_weight < 1.0 - cash - SUM_TOL:
            # The held names cannot carry the cap: the excess also goes, in equal parts, to the names held at 0.
            idle = [t for t in universe if full[t] <= 0]
            seed = {t: 1e-9 for t in idle}
            full = {t: w - (1e-9 * len(idle) * w if w > 0 else 0) for t, w in full.items()} | seed  # same total
            notes.append(f"normalize: {len(held_now)} holding(s) cannot carry max_weight {c.max_weight:g}; "
                         f"the excess is spread over {', '.join(idle)} too")
        full = cap_weights(full, c.max_weight)
        notes.append(f"normalize: capped {', '.join(sorted(over))} at {c.max_weight:g} and spread the excess")
    held = sum(1 for w in full.values() if w > 0)
    if held < c.min_holdings:
        raise OutputInvalid(f"hold at least {c.min_holdings} tickers with weight > 0 (got {held})")
    if c.max_tickers is not None and held > c.max_tickers:
        raise OutputInvalid(f"hold at most {c.max_tickers} tickers with weight > 0 (got {held})")
    return full, cash, notes


def cap_weights(weights: dict[str, float], cap: float) -> dict[str, float]:
    """Water-filling: clip at ``cap`` and spread the excess pro rata over the uncapped holdings."""
    w = dict(weights)
    for _ in range(len(w)):
        excess = sum(max(0.0, v - cap) for v in w.values())
        if excess <= 1e-12:
            break
        free = {t: v for t, v in w.items() if 0 < v < cap}
        base = sum(free.values())
        w = {t: min(v, cap) for t, v in w.items()}
        if base <= 0:
            raise OutputInvalid(f"cannot respect max_weight {cap:g} with so few holdings")
        for t, v in free.items():
            w[t] = v + excess * v / base
    return w


def check_evidence(ids: list[str], rules: TurnRules, where: str) -> None:
    if not rules.require_known_evidence:
        return
    unknown = sorted({i.strip("[]") for i in ids} - rules.evidence_ids)
    if unknown:
        raise OutputInvalid(f"{where} cites evidence IDs that are not in the memo: {', '.join(unknown[:10])}"
                            + (" …" if len(unknown) > 10 else "") + ". Cite only IDs shown in brackets in the memo.")


def _check_claims(p: Proposal, rules: TurnRules) -> None:
    ids = [c.claim_id for c in p.claims]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise OutputInvalid(f"claim_id values must be unique; repeated: {', '.join(dupes)}")
    for claim in p.claims:
        check_evidence(claim.evidence_ids, rules, f"claim {claim.claim_id}")
        outside = sorted(set(claim.impacts_positions) - set(rules.universe))
        if outside:
            raise OutputInvalid(f"claim {claim.claim_id} impacts tickers outside the universe: {', '.join(outside)}")


def validate_turn(phase: str, content: str, rules: TurnRules, policy: str) -> Validated:
    """Parse and check one turn against the schema of the agent's tier; the returned weights are full-universe
    and feasible. Claims are checked where the schema has them (not in a basic-tier answer, whose citations sit
    in its free text: CRIT and the audit count those)."""
    value = parse_json(content, schema_for(phase, rules.tier))
    notes: list[str] = []
    weights = None
    if isinstance(value, (Proposal, BasicProposal)):  # revisions included
        if isinstance(value, Proposal):
            _check_claims(value, rules)
        weights, cash, notes = check_allocation(value.allocation, value.cash_weight, rules, policy)
    elif isinstance(value, JudgeDecision):
        check_evidence(value.evidence_ids, rules, "the decision")
        weights, cash, notes = check_allocation(value.allocation, value.cash_weight, rules, policy)
    elif isinstance(value, (Critique, BasicCritique)):
        for item in value.critiques:
            if item.target_agent not in rules.peer_claims:
                raise OutputInvalid(f"target_agent {item.target_agent!r} is not another agent; choose from: "
                                    + ", ".join(sorted(rules.peer_claims)))
            targets = critique_targets(rules.peer_claims[item.target_agent])
            if item.target_claim not in targets:
                has_claims = bool(rules.peer_claims[item.target_agent])
                raise OutputInvalid(f"{item.target_agent} has no claim {item.target_claim}; "
                                    + ("its claims are: " if has_claims else "it lists no claims, so target: ")
                                    + ", ".join(targets))
            check_evidence(getattr(item, "evidence_ids", []), rules,
                           f"the critique of {item.target_agent} {item.target_claim}")
    return Validated(value, weights, notes)


def schema_outline(schema: dict[str, Any]) -> str:
    """A compact, human-readable outline of a JSON schema for the prompt.

    The full schema goes to the provider for constrained decoding; the prompt
    only needs the shape, and a short outline leaves room for the memo in
    small context windows.
    """
    defs = schema.get("$defs", {})

    def walk(node: dict[str, Any]) -> str:
        if "$ref" in node:
            return walk(defs[node["$ref"].split("/")[-1]])
        if "const" in node:
            return str(node["const"])
        if "enum" in node:
            if len(node["enum"]) > 12:
                return f"one of the {len(node['enum'])} evidence IDs in the memo"
            return "|".join(str(v) for v in node["enum"])
        if "anyOf" in node:
            return " or ".join(walk(n) for n in node["anyOf"])
        kind = node.get("type")
        if kind == "object":
            props = node.get("properties", {})
            return "{" + ", ".join(f'"{k}": {walk(v)}' for k, v in props.items()) + "}"
        if kind == "array":
            return "[" + walk(node.get("items", {})) + ", ...]"
        if kind in ("number", "integer"):
            lo, hi = node.get("minimum"), node.get("maximum")
            return kind + (f" {lo:g}..{hi:g}" if lo is not None and hi is not None else "")
        if kind == "string":
            return "string" + (f" like {node['pattern'].strip('^$')}" if "pattern" in node else "")
        return kind or "value"

    return walk(schema)
