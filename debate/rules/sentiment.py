from madbench.debate.rules.analyst import EvidenceView, Factor, RuleAnalyst


class SentimentAnalyst(RuleAnalyst):
    """News sentiment where present; otherwise short-term price action as its proxy."""

    role, claim_type, reasoning_type, lens = "sentiment", "sentiment", "observational", "sentiment"

    def factors(self, view: EvidenceView) -> list[Factor]:
        if len(view.has("SENT")) >= 2:
            return [Factor("SENT", +1), Factor("SVOL", +0.3)]
        return [Factor("RET20", +1), Factor("IDMOM", +0.5)]
