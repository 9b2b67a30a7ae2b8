"""The simulated provider's answers to the identification probe (``madbench leakage audit``), for testing it offline.

A simulated model with ``share`` s recognises a memo when a draw seeded by the memo's digest falls below s: it then
names every asset's company and the quarter correctly; otherwise it guesses each uniformly among the candidates. It
finds the right answers from the request's answer key (digests of memo|ticker and memo|quarter, which only the
simulator is sent), so a real model could not read them even if it were shown the context.

It records which memos it recognised (``recorded``, and one JSON line each in ``record_path`` when given, which
``madbench sim serve --record-recognised FILE`` sets): the draw recognises about ``share`` of the memos, not exactly
that share, so an audit is checked against what was recognised, not against the setting.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

from madbench.runner.leakage_audit import answer_key


@dataclass
class IdentifyAnswerer:
    #: Share of memos the simulated model recognises (deterministic by memo digest).
    share: float = 0.0
    seed: int = 0
    #: A JSONL file that gets ``{"memo": ..., "recognised": ...}`` for each memo the first time it is asked about.
    record_path: Path | None = None
    #: Memo digest -> whether it was recognised, for every memo asked about.
    recorded: dict[str, bool] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self):
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"recognised share must lie in [0, 1], got {self.share}")

    def recognises(self, memo: str) -> bool:
        draw = int(hashlib.sha256(f"{self.seed}|recognise|{memo}".encode()).hexdigest()[:16], 16) / 16 ** 16
        return draw < self.share

    def answer(self, context: dict) -> str:
        memo, tickers, quarters = context["memo"], list(context["candidate_tickers"]), list(context["candidate_quarters"])
        known = self.recognises(memo)
        self._record(memo, known)
        rng = random.Random(f"{self.seed}|{memo}")
        by_key = {answer_key(memo, t): t for t in tickers}
        assets = [{"asset": a, "ticker": by_key[context["keys"][a]] if known else rng.choice(tickers)}
                  for a in context["assets"]]
        quarter = next(q for q in quarters if answer_key(memo, q) == context["quarter_key"]) if known else rng.choice(quarters)
        return json.dumps({"assets": assets, "quarter": quarter})


    def _record(self, memo: str, known: bool) -> None:
        with self._lock:  # the server answers on several threads
            if memo in self.recorded:
                return
            self.recorded[memo] = known
            if self.record_path is not None:
                with open(self.record_path, "a") as f:
                    f.write(json.dumps({"memo": memo, "recognised": known}) + "\n")

    def recorded_share(self) -> float:
        """The share of the memos asked about that were recognised (NaN before any was asked about)."""
        with self._lock:
            return sum(self.recorded.values()) / len(self.recorded) if self.recorded else float("nan")


def is_identify_probe(context: dict) -> bool:
    return context.get("probe") == "identify"
