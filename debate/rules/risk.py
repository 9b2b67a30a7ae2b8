from madbench.debate.rules.analyst import EvidenceView, Factor, RuleAnalyst


class RiskAnalyst(RuleAnalyst):
    """Low volatility and low beta: favour the names that lose least in a drawdown."""

    role, claim_type, reasoning_type, lens = "risk", "risk", "risk_assessment", "low-volatility-and-beta"

    def factors(self, view: EvidenceView) -> list[Factor]:
        return [Factor("VOL60", -1), Factor("BETA", -1), Factor("DVOL60", -0.5), Factor("MDD1Y", +0.5)]
