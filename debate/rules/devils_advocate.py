from madbench.debate.rules.analyst import EvidenceView, Factor, RuleAnalyst


class DevilsAdvocate(RuleAnalyst):
    """Contrarian: favours what recent winners' consensus leaves behind (reversal of 60-day and trend signals)."""

    role, claim_type, reasoning_type, lens = "devils_advocate", "contrarian", "observational", "contrarian"

    def factors(self, view: EvidenceView) -> list[Factor]:
        return [Factor("RET60", -1), Factor("MOM200", -0.5), Factor("VOL60", -0.5)]
