from madbench.debate.rules.analyst import EvidenceView, Factor, RuleAnalyst

FUNDAMENTALS = [Factor("ROE", +1), Factor("GM", +0.5), Factor("DE", -0.5), Factor("ESURP", +0.5)]


class ValueAnalyst(RuleAnalyst):
    """Fundamentals where the memo has them (ROE, margins, leverage, surprises); otherwise long-horizon reversal."""

    role, claim_type, reasoning_type, lens = "value", "valuation", "observational", "value"

    def factors(self, view: EvidenceView) -> list[Factor]:
        present = [f for f in FUNDAMENTALS if len(view.has(f.field)) >= 2]
        return present or [Factor("RET252", -1), Factor("MOM200", -0.5)]
