from madbench.debate.rules.analyst import EvidenceView, Factor, RuleAnalyst


class TechnicalAnalyst(RuleAnalyst):
    """Momentum and trend: price over its 200-day average, 60-day and 12-1 returns, up-day share, strength vs SPY."""

    role, claim_type, reasoning_type, lens = "technical", "technical", "pattern", "momentum-and-trend"

    def factors(self, view: EvidenceView) -> list[Factor]:
        return [Factor("MOM200", +1), Factor("RET60", +1), Factor("RS60", +1),
                Factor("MOM12_1", +0.5), Factor("TREND", +0.5)]
