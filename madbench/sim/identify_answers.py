"""The simulated provider's answers to the identification probe (``madbench leakage audit``), for testing it offline.

A simulated model with ``share`` s recognises a memo when a draw seeded by the memo's digest falls below s: it then
names every asset's company and the quarter correctly; otherwise it guesses each uniformly among the candidates. It
finds the right answers from the request's answer key (digests of memo|ticker and memo|quarter, which only the
simulator is sent), so a real model could not read them even if it were shown the context.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

from madbench.runner.leakage_audit import answer_key


@dataclass
class IdentifyAnswerer:
    #: Share of memos the simulated model recognises (deterministic by memo digest).
    share: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"recognised share must lie in [0, 1], got {self.share}")

    def recognises(self, memo: str) -> bool:
        draw = int(hashlib.sha256(f"{self.seed}|recognise|{memo}".encode()).hexdigest()[:16], 16) / 16 ** 16
        return draw < self.share

    def answer(self, context: dict) -> str:
        memo, tickers, quarters = context["memo"], list(context["candidate_tickers"]), list(context["candidate_quarters"])
        known = self.recognises(memo)
        rng = random.Random(f"{self.seed}|{memo}")
        by_key = {answer_key(memo, t): t for t in tickers}
        assets = [{"asset": a, "ticker": by_key[context["keys"][a]] if known else rng.choice(tickers)}
                  for a in context["assets"]]
        quarter = next(q for q in quarters if answer_key(memo, q) == context["quarter_key"]) if known else rng.choice(quarters)
        return json.dumps({"assets": assets, "quarter": quarter})


def is_identify_probe(context: dict) -> bool:
    return context.get("probe") == "identify"
