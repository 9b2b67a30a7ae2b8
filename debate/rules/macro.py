from madbench.debate.rules.analyst import EvidenceView, Factor, RuleAnalyst

# Regime thresholds: stress when volatility or credit spreads are high or the curve is inverted;
# inflationary when CPI runs at 4% or more. (Levels, not forecasts: a deliberately plain map.)
STRESS = {"VIX": 25.0, "HY": 5.0}
INFLATION_CPI = 4.0


def regime(macro: dict[str, float]) -> tuple[bool, bool]:
    stressed = (macro.get("VIX", 0) >= STRESS["VIX"] or macro.get("HY", 0) >= STRESS["HY"]
                or macro.get("CURVE", 0) < 0)
    inflationary = macro.get("CPI", 0) >= INFLATION_CPI
    return stressed, inflationary


class MacroAnalyst(RuleAnalyst):
    """A rates-and-inflation regime map: defensive (low beta) under stress, momentum tilt under inflation, risk-on otherwise."""

    role, claim_type, reasoning_type, lens = "macro", "macro", "causal", "macro-regime"

    def factors(self, view: EvidenceView) -> list[Factor]:
        stressed, inflationary = regime(view.macro)
        if stressed:
            out = [Factor("BETA", -1), Factor("VOL60", -0.5)]
        else:
            out = [Factor("BETA", +1), Factor("MOM200", +0.5)]
        if inflationary:
            out.append(Factor("RET60", +0.5))
        return out

    def context_ids(self, view: EvidenceView) -> list[str]:
        return [f"L1-{f}" for f in ("VIX", "HY", "CURVE", "CPI") if f in view.macro]
