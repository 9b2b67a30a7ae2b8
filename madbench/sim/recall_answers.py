"""The simulated provider's answers to the recall probe (``madbench probe recall``), for trying it offline.

A simulated model with ``accuracy`` a names the realised bucket of each ticker with probability a (it "remembers",
reading the returns from a data pack) and otherwise a bucket drawn uniformly at random; a = 0 (the default, no pack
needed) is a model that remembers nothing. Draws are seeded by (seed, quarter, ticker), so the same question gets
the same answer whatever the order or the batching of the requests.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from madbench.data.market.pack import Pack
from madbench.eval.stats.recall import bucket_index
from madbench.runner.recall_probe import realised_returns


@dataclass
class RecallAnswerer:
    #: Probability of naming the realised bucket; the rest are uniform guesses.
    accuracy: float = 0.0
    #: Where the realised returns come from; needed when accuracy > 0.
    pack: Pack | None = None
    seed: int = 0

    def __post_init__(self):
        if not 0.0 <= self.accuracy <= 1.0:
            raise ValueError(f"recall accuracy must lie in [0, 1], got {self.accuracy}")
        if self.accuracy > 0 and self.pack is None:
            raise ValueError("a simulated model that remembers needs a pack to read the realised returns from")

    def answer(self, context: dict) -> str:
        """The JSON answer to one recall request (its ``madbench_context``)."""
        quarter, tickers, labels = context["quarter"], list(context["tickers"]), list(context["buckets"])
        truth: dict[str, str] = {}
        if self.pack is not None:
            _, _, returns = realised_returns(self.pack, quarter, tickers, where=f"sim recall {quarter}")
            index = bucket_index([returns[t] for t in tickers], context["edges_pct"])
            truth = {t: labels[int(i)] for t, i in zip(tickers, index, strict=True)}
        answers = []
        for t in tickers:
            rng = random.Random(f"{self.seed}|{quarter}|{t}")
            remembers = rng.random() < self.accuracy
            answers.append({"ticker": t, "bucket": truth[t] if remembers else rng.choice(labels)})
        return json.dumps({"answers": answers})


def is_recall_probe(context: dict) -> bool:
    return context.get("probe") == "recall"
