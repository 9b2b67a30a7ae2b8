"""CRIT: four-pillar scores of an agent's argument, with count-implied caps (PAPER_NOTES §3).

    ρ_i = (P1 + P2 + P3 + P4) / 4          ρ̄ = mean over agents of ρ_i

Caps by failure count on the pillar each failure belongs to:
    1 failure → 0.70,  2–3 → 0.55,  4 or more → 0.40
    P1 logical validity       ← contradictions, orphaned positions, conclusion drift
    P2 evidential support     ← unsupported claims
    P3 alternative considered ← ignored critiques, premature certainty
    P4 causal alignment       ← causal overreach
A parsed score above its cap is clipped, and the clip is recorded.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from madbench.debate.grading import PILLARS, CritDiagnostics, PillarExplanations, PillarScores


class CritAnswer(BaseModel):
    """What the CRIT judge returns: failures first, then scores, then why."""

    model_config = ConfigDict(extra="forbid")
    diagnostics: CritDiagnostics
    scores: PillarScores
    explanations: PillarExplanations


def cap_for(count: int) -> float:
    return 1.0 if count <= 0 else 0.70 if count == 1 else 0.55 if count <= 3 else 0.40


def pillar_counts(d: CritDiagnostics) -> dict[str, int]:
    return {"logical_validity": d.contradictions + d.orphaned_positions + int(d.conclusion_drift),
            "evidential_support": d.unsupported_claims,
            "alternative_consideration": d.ignored_critiques + int(d.premature_certainty),
            "causal_alignment": d.causal_overreach}


def apply_caps(scores: PillarScores, d: CritDiagnostics) -> tuple[PillarScores, list[str]]:
    out, clips = scores.model_dump(), []
    for pillar, count in pillar_counts(d).items():
        cap = cap_for(count)
        if out[pillar] > cap:
            clips.append(f"{pillar} {out[pillar]:.2f} clipped to {cap:.2f} ({count} failure(s))")
            out[pillar] = cap
    return PillarScores(**out), clips


def rho(scores: PillarScores) -> float:
    return sum(getattr(scores, p) for p in PILLARS) / 4.0


def rho_bar(rhos: list[float]) -> float:
    return sum(rhos) / len(rhos) if rhos else float("nan")
