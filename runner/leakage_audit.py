"""`madbench leakage audit`: does a blind memo still give its companies and its quarter away?

Two passes over the blind memos of a set of scenarios (each built as a blind run builds it: ``blind_memo`` with the
given options):

- residue (offline, deterministic): per memo, the names, years, month names, exact macro levels, lower-case terms
  outside the generic vocabulary and exact amounts the blind rules left (``madbench.data.residue``), and its macro
  block's k-anonymity: how many quarters of the pack's 2018Q1-2025Q4 show the same blind macro block
  (``madbench.data.macro_anonymity``; 1 dates the quarter);
- identification (through the gateway: cached, budgeted, rate-limited like every call): a model is shown the blind
  memo with the candidates (every stock of the pack, every quarter the pack can memo) and asked the company of each
  asset and the quarter. Per memo, one quarter trial and one trial per asset.

The hit rates, against chance and with 95% intervals over memos, are ``madbench.eval.stats.identification``'s.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd
from pydantic import BaseModel, ConfigDict

from madbench.data.blind import Blinded, BlindOptions, blind_memo, pack_companies
from madbench.data.macro_anonymity import k_among
from madbench.data.market.calendar import Quarter
from madbench.data.market.pack import Pack
from madbench.data.memo import build_memo, macro_block
from madbench.data.neuter import MASK
from madbench.data.residue import RESIDUE_KINDS, memo_residue
from madbench.data.scenario import Scenario
from madbench.debate.schemas import json_schema
from madbench.debate.validation import parse_json, schema_outline
from madbench.gateway import Completion, Gateway, GatewayFailure, LLMRequest, Message, ModelSpec, OutputInvalid


def answer_key(memo: str, value: str) -> str:
    """The digest the probe sends the simulator for a right answer (a company's ticker, or the quarter): it can check a
    candidate against it, and nobody can read the answer from it."""
    return hashlib.sha256(f"{memo}|{value}".encode()).hexdigest()[:16]


SYSTEM = ("You are auditing an anonymised financial memo. Its companies are pseudonyms (ASSET_A, ...) and its dates are "
          "relative. Say which real company each pseudonym is and which calendar quarter the memo invests in. If you "
          "cannot tell, give your best guess among the candidates. Answer with JSON only.")


class AssetGuess(BaseModel):
    model_config = ConfigDict(extra="forbid")
    asset: str
    ticker: str


class IdentifyAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    assets: list[AssetGuess]
    quarter: str


#: What a rule-based model answers for every asset and for the quarter: it reads only the memo's numbers and remembers
#: nothing, so it names nothing (each trial a miss; a guess would only add noise around chance).
UNKNOWN = "unknown"
PROBE = "identify"


class ProbeFailed(Exception):
    """Some identification requests of a model got no valid answer (the answers that came are cached)."""


def is_identify_probe(context: dict) -> bool:
    return context.get("probe") == PROBE


def rule_identify_answer(context: dict) -> IdentifyAnswer:
    """A ``rules/…`` model's answer to the identification probe: "unknown" for each asset and for the quarter."""
    return IdentifyAnswer(assets=[AssetGuess(asset=a, ticker=UNKNOWN) for a in context["assets"]], quarter=UNKNOWN)


@dataclass(frozen=True)
class AuditMemo:
    scenario: Scenario
    blinded: Blinded


def blind_memos(scenarios: list[Scenario], pack: Pack, options: BlindOptions) -> list[AuditMemo]:
    """Each scenario's blind memo, as a blind run with ``options`` builds it."""
    companies = pack_companies(pack.universe)
    return [AuditMemo(s, blind_memo(build_memo(s, pack), s, companies, options)) for s in scenarios]


def residue_table(memos: list[AuditMemo], reference: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per memo: its residue counts by kind and a few examples; with ``reference`` (quarter -> blind macro
    block, ``macro_anonymity.reference_blocks``), ``macro_k``: the k-anonymity of its macro block among them."""
    rows = []
    for m in memos:
        r = memo_residue(m.blinded.memo)
        anon = {} if reference is None else {"macro_k": k_among(macro_block(m.blinded.memo), m.scenario.invest_quarter,
                                                               reference)}
        rows.append({"scenario_id": m.scenario.id, "quarter": m.scenario.invest_quarter, **r.counts, "total": r.total, **anon,
                     "examples": "; ".join(f"{k}: {', '.join(v)}" for k, v in r.examples.items())})
    extra = [] if reference is None else ["macro_k"]
    return pd.DataFrame(rows, columns=["scenario_id", "quarter", *RESIDUE_KINDS, "total", *extra, "examples"])


def macro_k_line(residue: pd.DataFrame, reference: Mapping[str, str]) -> str:
    """What the audit prints of the memos' macro k-anonymity (``residue_table``'s ``macro_k``)."""
    quarters = list(reference)
    window = f"{len(quarters)} quarters {quarters[0]}-{quarters[-1]}" if quarters else "0 quarters"
    k = residue["macro_k"]
    per = ", ".join(f"{q} {int(v)}" for q, v in residue.groupby("quarter", sort=True)["macro_k"].first().items())
    return (f"macro k-anonymity (of the pack's {window}, how many show the same blind macro block; 1 dates the "
            f"quarter): min {int(k.min())}, median {k.median():g}, {int((k < 4).sum())} of {len(k)} memos below 4; by "
            f"quarter: {per}")


_TEXT_TOKEN = re.compile(r"\[[A-Z]+(?:_\d+)?\]|\w+(?:[&'\u2019.\-/\u2212+]\w+)*")


@dataclass(frozen=True)
class MaskedShare:
    """What the masking took from the evidence's texts over a set of blind memos."""

    tokens: int  # tokens of the texts as sent (a mask is one)
    by_class: dict[str, int]  # masks of each class among them
    terms: list[tuple[str, int]]  # the masked lower-case words, most frequent first

    @property
    def share(self) -> float:
        """masked tokens / tokens."""
        return sum(self.by_class.values()) / self.tokens if self.tokens else 0.0


def masked_share(memos: list[AuditMemo]) -> MaskedShare:
    """How much of the blind texts is masks (readability's price), and which lower-case words became terms."""
    tokens = 0
    by_class: Counter[str] = Counter()
    terms: Counter[str] = Counter()
    for m in memos:
        word_of = {t.mask: t.text for t in m.blinded.masked}
        for it in m.blinded.memo.items:
            if it.unit != "text" or not isinstance(it.value, str):
                continue
            for tok in _TEXT_TOKEN.findall(it.value):
                tokens += 1
                if MASK.fullmatch(tok):
                    cls = tok[1:-1].split("_")[0]  # PRODUCT of [PRODUCT_7], MONTH of [MONTH]
                    by_class[cls] += 1
                    if cls == "TERM":
                        terms[word_of[tok]] += 1
    return MaskedShare(tokens, dict(by_class.most_common()), terms.most_common())


def candidate_quarters(pack: Pack, scenarios: list[Scenario]) -> list[str]:
    """Every quarter the pack has prices in, and every quarter of ``scenarios`` (the right answer is always a choice)."""
    dates = pack.calendar.dates
    q, last = Quarter.of(dates[0]), Quarter.of(dates[-1])
    out = {s.invest_quarter for s in scenarios}
    while q.start <= last.start:
        out.add(str(q))
        q = q.next()
    return sorted(out, key=lambda x: Quarter.parse(x).start)


def identify_request(model: str, memo: AuditMemo, tickers: list[str], quarters: list[str],
                     temperature: float = 0.0) -> LLMRequest:
    """The probe's request for one memo, at ``temperature`` (``preflight.probe_temperature``). Its context (the answer key as digests, for the simulator only) never goes
    to a real provider."""
    b = memo.blinded
    key = b.memo.sha256
    user = (f"{b.memo.text}\n\nCandidate companies (tickers): {', '.join(tickers)}\nCandidate quarters: {', '.join(quarters)}\n"
            f"Name the ticker of each of {', '.join(b.memo.tickers)} and the invest quarter.\n"
            f"Answer in this JSON form: {schema_outline(json_schema(IdentifyAnswer))}")
    return LLMRequest(model=model, temperature=temperature, response_schema=json_schema(IdentifyAnswer),
                      messages=[Message(role="system", content=SYSTEM), Message(role="user", content=user)],
                      context={"probe": PROBE, "memo": key, "assets": list(b.memo.tickers),
                               "candidate_tickers": tickers, "candidate_quarters": quarters,
                               "keys": {p: answer_key(key, t) for t, p in b.mapping.items()},
                               "quarter_key": answer_key(key, memo.scenario.invest_quarter)})


def identify_validator(assets: list[str]):
    def validate(content: str, spec: ModelSpec) -> IdentifyAnswer:
        answer = parse_json(content, IdentifyAnswer)
        named = sorted(a.asset for a in answer.assets)
        if named != sorted(assets):
            raise OutputInvalid(f"name each of {', '.join(assets)} exactly once (got {', '.join(named) or 'none'})")
        return answer
    return validate


async def identify(gateway: Gateway, spec: ModelSpec, memos: list[AuditMemo], pack: Pack,
                   temperature: float = 0.0) -> pd.DataFrame:
    """One row per memo: its assets' hits and its quarter's hit, asked at ``temperature``."""
    tickers = sorted(c.ticker for c in pack_companies(pack.universe))
    quarters = candidate_quarters(pack, [m.scenario for m in memos])
    calls = [gateway.complete(identify_request(spec.model, m, tickers, quarters, temperature), spec,
                              identify_validator(list(m.blinded.memo.tickers))) for m in memos]
    settled = await asyncio.gather(*calls, return_exceptions=True)
    for outcome in settled:
        if isinstance(outcome, BaseException) and not isinstance(outcome, GatewayFailure):
            raise outcome
    failed = [o for o in settled if isinstance(o, GatewayFailure)]
    if failed:
        raise ProbeFailed(f"{spec.model}: {len(failed)} of {len(memos)} identification requests got no valid answer; "
                           f"the first: {failed[0].reason} (answers that came are cached: the same command resumes)")
    rows = []
    for m, c in zip(memos, settled, strict=True):
        assert isinstance(c, Completion)  # every other outcome raised above
        truth = m.blinded.reverse
        answer: IdentifyAnswer = c.value
        hits = sum(truth[a.asset] == a.ticker for a in answer.assets)
        rows.append({"scenario_id": m.scenario.id, "quarter": m.scenario.invest_quarter, "model": spec.model,
                     "assets": len(answer.assets), "asset_hits": hits, "quarter_hit": answer.quarter == m.scenario.invest_quarter,
                     "asset_chance": 1 / len(tickers), "quarter_chance": 1 / len(quarters), "cached": c.cached})
    return pd.DataFrame(rows)
