"""Shared machinery of the rule-based analysts (no LLM, fully deterministic).

Each role supplies one scoring rule: a signed score per ticker from named memo
fields. The base class turns scores into a feasible allocation, writes claims
that cite the exact evidence IDs used, critiques peers where its own scores
disagree with their positions, and answers every critique received.

A basic-tier analyst (``task.tier``) returns the basic schema instead: the same allocation with a short
free-text rationale that cites one memo ID per holding in brackets, no claims; its critiques are free text
and its revision notes answer each critic by name. A critique of a claim-less peer targets its allocation.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from madbench.debate.schemas import (
    ALLOCATION_TARGET,
    BasicCritique,
    BasicCritiqueItem,
    BasicProposal,
    BasicRevision,
    Claim,
    Critique,
    CritiqueItem,
    CritiqueResponse,
    Holding,
    PositionRationale,
    Proposal,
    Revision,
)
from madbench.debate.task import AgentTask, StageTask
from madbench.debate.validation import cap_weights


@dataclass
class Factor:
    """A memo field with the sign of its effect on attractiveness and a weight."""

    field: str
    sign: float
    weight: float = 1.0
    label: str = ""


class EvidenceView:
    """Numeric memo values by (ticker, field) and macro field."""

    def __init__(self, task: AgentTask | StageTask):
        self.universe = task.universe
        self.values: dict[tuple[str, str], float] = {}
        self.macro: dict[str, float] = {}
        for item in task.evidence:
            if not isinstance(item.value, (int, float)) or isinstance(item.value, bool) or math.isnan(item.value):
                continue
            head, _, field = item.id.partition("-")
            if head == "L1":
                self.macro[field] = float(item.value)
            elif head in task.universe:
                self.values[(head, field)] = float(item.value)

    def has(self, field: str) -> list[str]:
        return [t for t in self.universe if (t, field) in self.values]

    def zscores(self, field: str) -> dict[str, float]:
        tickers = self.has(field)
        xs = [self.values[(t, field)] for t in tickers]
        if len(xs) < 2:
            return {t: 0.0 for t in tickers}
        mean = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
        return {t: 0.0 if sd == 0 else (self.values[(t, field)] - mean) / sd for t in tickers}


def score_tickers(view: EvidenceView, factors: list[Factor]) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Weighted sum of signed z-scores; also the fields each ticker's score actually used."""
    scores = {t: 0.0 for t in view.universe}
    used: dict[str, list[str]] = {t: [] for t in view.universe}
    for f in factors:
        for t, z in view.zscores(f.field).items():
            scores[t] += f.sign * f.weight * z
            used[t].append(f.field)
    return scores, used


def n_holdings(task: AgentTask | StageTask) -> int:
    c, n = task.constraints, len(task.universe)
    k = max(c.min_holdings, math.ceil(1.0 / c.max_weight - 1e-9), math.ceil(n / 2))
    return min(n, c.max_tickers or n, k)


def allocate(scores: dict[str, float], task: AgentTask | StageTask) -> dict[str, float]:
    """Rank-linear weights over the top k (k, k−1, …, 1), capped at max_weight; zero elsewhere.

    Ties break by ticker, so the same memo always gives the same allocation.
    """
    ranked = sorted(task.universe, key=lambda t: (-scores[t], t))
    top = ranked[: n_holdings(task)]
    raw = {t: float(len(top) - i) for i, t in enumerate(top)}
    total = sum(raw.values())
    weights = cap_weights({t: raw[t] / total for t in top}, task.constraints.max_weight)
    return {t: round(weights.get(t, 0.0), 6) for t in task.universe}


def fix_rounding(weights: dict[str, float]) -> dict[str, float]:
    """Put the rounding residue on the largest holding so the sum is exactly 1."""
    top = max(weights, key=lambda t: (weights[t], t))
    weights = dict(weights)
    weights[top] = round(weights[top] + 1.0 - sum(weights.values()), 6)
    return weights


class RuleAnalyst:
    """Subclasses set ``role``, ``claim_type``, ``reasoning_type`` and ``factors``."""

    role: str = ""
    claim_type: str = "thesis"
    reasoning_type: str = "observational"
    lens: str = ""

    def factors(self, view: EvidenceView) -> list[Factor]:
        raise NotImplementedError

    def context_ids(self, view: EvidenceView) -> list[str]:
        """Macro IDs a role cites alongside its ticker evidence."""
        return []

    # -- scoring shared by every phase

    def assess(self, task: AgentTask) -> tuple[dict[str, float], dict[str, list[str]]]:
        view = EvidenceView(task)
        return score_tickers(view, self.factors(view))

    def _claims(self, task: AgentTask, weights: dict[str, float], scores, used) -> list[Claim]:
        view = EvidenceView(task)
        ctx = self.context_ids(view)
        claims = []
        held = sorted((t for t in task.universe if weights[t] > 0), key=lambda t: (-weights[t], t))
        for i, t in enumerate(held, start=1):
            fields = used[t] or []
            ids = [f"{t}-{f}" for f in fields] + ctx
            facts = ", ".join(f"{f} {view.values[(t, f)]:+.3g}" for f in fields) or "no scored evidence"
            conf = round(0.5 + 0.4 * (1 / (1 + math.exp(-scores[t]))) - 0.2, 3)
            claims.append(Claim(
                claim_id=f"C{i}", claim_text=f"{t} scores {scores[t]:+.2f} on the {self.lens} screen ({facts}).",
                claim_type=self.claim_type, reasoning_type=self.reasoning_type, evidence_ids=ids,
                assumptions=[f"the {self.lens} signal persists through the next quarter"],
                falsifiers=[f"{t}'s {fields[0] if fields else 'signal'} reverses sign"],
                impacts_positions=[t], confidence=max(0.05, min(0.95, conf))))
        return claims

    def _basic_parts(self, task: AgentTask, weights: dict[str, float]):
        """The basic tier's answer: the allocation, a short rationale citing one memo ID per holding, no claims."""
        scores, used = self.assess(task)
        weights = fix_rounding(weights)
        ctx = " ".join(f"[{i}]" for i in self.context_ids(EvidenceView(task)))
        held = sorted((t for t in task.universe if weights[t] > 0), key=lambda t: (-weights[t], t))
        named = ", ".join(f"{t} {weights[t]:.2f}" + (f" [{t}-{used[t][0]}]" if used[t] else "") for t in held)
        return dict(
            thesis=f"Rule-based {self.role} analyst (non-LLM): weights follow the {self.lens} screen"
                   + (f" {ctx}" if ctx else "") + f". Held: {named}.",
            allocation=[Holding(ticker=t, weight=weights[t]) for t in task.universe],
            cash_weight=0.0, risks_or_falsifiers=[f"The {self.lens} screen has no edge this quarter."],
            confidence=0.5,
        )

    def _proposal_parts(self, task: AgentTask, weights: dict[str, float]):
        scores, used = self.assess(task)
        weights = fix_rounding(weights)
        claims = self._claims(task, weights, scores, used)
        by_ticker = {c.impacts_positions[0]: c.claim_id for c in claims}
        return dict(
            thesis=f"Rule-based {self.role} analyst (non-LLM): weights follow the {self.lens} screen.",
            allocation=[Holding(ticker=t, weight=weights[t]) for t in task.universe],
            cash_weight=0.0, claims=claims,
            position_rationale=[PositionRationale(ticker=t, supporting_claims=[by_ticker[t]]) for t in by_ticker],
            risks_or_falsifiers=[f"The {self.lens} screen has no edge this quarter."],
        )

    # -- phases

    def propose(self, task: AgentTask) -> Proposal | BasicProposal:
        scores, _ = self.assess(task)
        if task.tier == "basic":
            return BasicProposal(**self._basic_parts(task, allocate(scores, task)))
        return Proposal(**self._proposal_parts(task, allocate(scores, task)))

    def critique(self, task: AgentTask) -> Critique | BasicCritique:
        scores, used = self.assess(task)
        items: list[CritiqueItem] = []
        basic_items: list[BasicCritiqueItem] = []
        for agent in sorted(task.peers):
            peer = task.peers[agent]
            peer_w = {h.ticker: h.weight for h in peer.allocation}
            if peer.claims:
                # Attack the claim behind the peer's most weighted position that this role likes least.
                def badness(claim, peer_w=peer_w):
                    return min((scores.get(t, 0.0) - peer_w.get(t, 0.0) for t in claim.impacts_positions), default=0.0)
                claim = min(peer.claims, key=lambda c: (badness(c), c.claim_id))
                target = claim.claim_id
                t = next((x for x in claim.impacts_positions if x in scores), task.universe[0])
            else:  # a claim-less (basic-tier) peer: attack its allocation, at the holding this role likes least
                target = ALLOCATION_TARGET
                held = [x for x in task.universe if peer_w.get(x, 0.0) > 0] or task.universe
                t = min(held, key=lambda x: (scores.get(x, 0.0) - peer_w.get(x, 0.0), x))
            ids = [f"{t}-{f}" for f in used.get(t, [])]
            # Contentiousness β sharpens objections: the same evidence is pressed harder at high β.
            severity = (0.5 + task.beta) / (1 + math.exp(scores.get(t, 0.0)))
            tone = "strongly " if task.beta > 0.6 else ""
            text = f"The {self.lens} screen {tone}disagrees on {t}: it scores {scores.get(t, 0.0):+.2f}."
            confidence = round(min(0.95, max(0.05, severity)), 3)
            if task.tier == "basic":  # free text, its evidence cited in brackets inside it
                basic_items.append(BasicCritiqueItem(
                    target_agent=agent, target_claim=target, critique_text=text[:-1] + (f" [{ids[0]}]." if ids else "."),
                    suggested_adjustment=f"Cut {t} by 5 points.", objection_confidence=confidence))
                continue
            items.append(CritiqueItem(
                target_agent=agent, target_claim=target, critique_text=text,
                evidence_ids=ids, portfolio_implication=f"{t} is overweighted relative to its {self.lens} evidence.",
                suggested_adjustment=f"Cut {t} by 5 points.", falsifier=f"{t}'s {self.lens} score turns positive.",
                objection_confidence=confidence))
        if task.tier == "basic":
            return BasicCritique(from_role=self.role, critiques=basic_items)
        return Critique(from_role=self.role, critiques=items)

    def revise(self, task: AgentTask) -> Revision | BasicRevision:
        assert task.own is not None, "revise needs the agent's own proposal"
        scores, _ = self.assess(task)
        weights = {h.ticker: h.weight for h in task.own.allocation}
        responses, answers, notes, cuts = [], [], [], {}
        for rc in task.critiques_received:
            if rc.item.target_claim == ALLOCATION_TARGET:  # a critique of the whole allocation: the ticker it names
                t = named_ticker([rc.item.suggested_adjustment, rc.item.critique_text], task.universe)
            else:
                claim = next((c for c in task.own.claims if c.claim_id == rc.item.target_claim), None)
                t = claim.impacts_positions[0] if claim and claim.impacts_positions else None
            # Under revision limits (a JS-collapse retry) the analyst holds its allocation: the nudge asks it
            # to keep its independent view, and holding is always within the limits.
            accept = task.revision_limits is None and t is not None and weights.get(t, 0) > 0 and (
                rc.item.objection_confidence >= 0.6 or scores.get(t, 0.0) < 0)
            if accept and t is not None and t not in cuts:
                cuts[t] = min(0.05, weights[t] / 2)
            score = scores.get(t, 0.0) if t is not None else 0.0
            answers.append(f"{rc.from_agent} on {rc.item.target_claim}: " + (
                f"accepted, {t} is cut." if accept else f"rebutted, my screen scores {t} at {score:+.2f}."))
            if task.tier == "basic":
                continue
            responses.append(CritiqueResponse(
                from_agent=rc.from_agent, target_claim=rc.item.target_claim,
                disposition="accept" if accept else "rebut",
                justification=(f"Accepted: {t} is cut on this evidence." if accept else
                               f"Rebutted: my screen scores {t} at {score:+.2f}, so the position stands.")))
        if cuts:
            # Move the cut weight to the best-scored holdings nobody objected to, never back to a cut ticker.
            receivers = sorted((x for x in task.universe if x not in cuts and weights[x] < task.constraints.max_weight),
                               key=lambda x: (-(weights[x] > 0), -scores[x], x))
            freed = sum(cuts.values())
            for t, cut in cuts.items():
                weights[t] -= cut
            for x in receivers:
                room = task.constraints.max_weight - weights[x]
                give = min(room, freed)
                weights[x] += give
                freed -= give
                if freed <= 1e-12:
                    break
            if freed > 1e-12:  # nowhere to put it: undo proportionally rather than break the constraints
                for t, cut in cuts.items():
                    weights[t] += freed * cut / sum(cuts.values())
            notes.append("cut " + ", ".join(f"{t} by {c:.3f}" for t, c in sorted(cuts.items())))
        weights = cap_weights(weights, task.constraints.max_weight)
        if task.tier == "basic":  # every critic answered by name in the notes
            parts = self._basic_parts(task, {t: round(w, 6) for t, w in weights.items()})
            told = " ".join(answers) + " " + ("; ".join(notes) or "No change.") if answers else "No critiques received."
            return BasicRevision(**parts, revision_notes=told)
        parts = self._proposal_parts(task, {t: round(w, 6) for t, w in weights.items()})
        return Revision(**parts, critique_responses=responses, revision_notes="; ".join(notes) or "no change")


def named_ticker(texts: list[str], universe: list[str]) -> str | None:
    """The first universe ticker the texts name as a word, in text order (None when none is named)."""
    for text in texts:
        found = [(m.start(), t) for t in universe for m in [re.search(rf"(?<![A-Za-z0-9]){re.escape(t)}(?![A-Za-z0-9])", text)] if m]
        if found:
            return min(found)[1]
    return None
