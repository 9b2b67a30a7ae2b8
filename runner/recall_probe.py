"""`madbench probe recall`: what does a model remember of the quarters a batch asks it about?

With no memo, the model is asked which of five return buckets each ticker of each scenario fell in during the
scenario's quarter: the holding window of the backtest, from the as-of close (the last trading day before the
quarter) to the quarter's last close, on the pack's price basis (adjusted closes: total return). Its answers are
scored against the realised buckets (``madbench.eval.stats.recall``: hit rate, chance rate, kappa, binomial test).

A (quarter, ticker) that several scenarios share is asked once, so every observation is a distinct trial. A
quarter's tickers go out in requests of at most ``max_tickers_per_request``, each through the gateway like any
debate turn: cached, rate-limited, and validated (every ticker answered once, each with a known bucket), an
invalid answer going back to the model as feedback.

Rule-based models (``rules/…``) are refused: they read only the memo, so they remember nothing by construction
and a probe of them would measure nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import jinja2
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from madbench.data.atomic import atomic_write, frame_writer
from madbench.data.errors import InputError
from madbench.data.market.calendar import Quarter
from madbench.data.market.pack import Pack
from madbench.data.paths import CONFIGS_DIR
from madbench.data.scenario import Scenario, check_against_pack
from madbench.data.templates import compile_template, load_yaml_model
from madbench.debate.schemas import json_schema
from madbench.debate.validation import parse_json, schema_outline
from madbench.eval.backtest import holding_window
from madbench.eval.stats.recall import bucket_index, recall_table
from madbench.gateway import Completion, Gateway, GatewayFailure, LLMRequest, Message, ModelSpec, OutputInvalid
from madbench.runner.cutoffs import CutoffRegistry

BUCKETS = ("strong_down", "down", "flat", "up", "strong_up")
Bucket = Literal["strong_down", "down", "flat", "up", "strong_up"]
PROBE_FILE = CONFIGS_DIR / "probes" / "recall.yaml"
PROMPT_VARIABLES = frozenset({"quarter", "as_of", "end", "tickers", "buckets", "schema"})
OBSERVATIONS_FILE, SUMMARY_FILE = "recall.parquet", "recall_summary.parquet"


class RecallProbeSpec(BaseModel):
    """configs/probes/recall.yaml."""
    model_config = ConfigDict(extra="forbid")
    system: str
    variables: list[str]
    template: str
    edges_pct: list[float] = Field(min_length=len(BUCKETS) - 1, max_length=len(BUCKETS) - 1)
    max_tickers_per_request: int = Field(20, ge=1)

    @field_validator("edges_pct")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if any(b <= a for a, b in zip(v, v[1:], strict=False)):
            raise ValueError(f"edges must increase strictly, got {v}")
        return v


class TickerRecall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ticker: str
    bucket: Bucket


class RecallAnswer(BaseModel):
    """The model's answer: one bucket per ticker asked."""
    model_config = ConfigDict(extra="forbid")
    answers: list[TickerRecall]


@dataclass(frozen=True)
class RecallPrompt:
    spec: RecallProbeSpec
    template: jinja2.Template
    digest: str

    def buckets(self) -> list[dict[str, str]]:
        """Each bucket's label and its range in words, from the edges (lower edge included)."""
        e = self.spec.edges_pct
        ranges = [f"below {e[0]:+g}%", *[f"from {a:+g}% to below {b:+g}%" for a, b in zip(e, e[1:], strict=False)], f"{e[-1]:+g}% or more"]
        return [{"label": label, "range": text} for label, text in zip(BUCKETS, ranges, strict=True)]


def load_recall_prompt(path: str | Path | None = None) -> RecallPrompt:
    path = Path(path) if path else PROBE_FILE
    spec = load_yaml_model(path, RecallProbeSpec)
    template = compile_template(spec.template, set(spec.variables), f"{path}: template", set(PROMPT_VARIABLES))
    compile_template(spec.system, set(), f"{path}: system", set())
    body = "\0".join([spec.system, spec.template, repr(spec.edges_pct)])
    return RecallPrompt(spec, template, hashlib.sha256(body.encode()).hexdigest())


@dataclass(frozen=True)
class QuarterItems:
    """One quarter's distinct tickers across the scenarios, with their holding window and realised returns."""
    quarter: str
    as_of: str
    end: str
    returns_pct: dict[str, float]
    scenario_ids: dict[str, list[str]] = field(default_factory=dict)

    @property
    def tickers(self) -> list[str]:
        return sorted(self.returns_pct)


def realised_returns(pack: Pack, quarter: str, tickers: list[str], where: str) -> tuple[str, str, dict[str, float]]:
    """(as-of date, last date, ticker -> total return in %) over the backtest's holding window of ``quarter``."""
    window = holding_window(pack, Quarter.parse(quarter), tickers, rf="0", where=where)
    change = (window.prices[-1] / window.prices[0] - 1.0) * 100.0
    return str(window.dates[0].date()), str(window.dates[-1].date()), {t: float(x) for t, x in zip(tickers, change, strict=True)}


def quarter_items(scenarios: list[Scenario], pack: Pack, where: str) -> list[QuarterItems]:
    """The scenarios grouped by quarter (in quarter order), each (quarter, ticker) once."""
    owners: dict[str, dict[str, list[str]]] = {}
    for s in scenarios:
        check_against_pack(s, pack, f"{where}: {s.id}")
        for t in s.tickers:
            owners.setdefault(s.invest_quarter, {}).setdefault(t, []).append(s.id)
    items = []
    for quarter in sorted(owners, key=lambda q: (Quarter.parse(q).start)):
        tickers = sorted(owners[quarter])
        as_of, end, returns = realised_returns(pack, quarter, tickers, f"{where}: {quarter}")
        items.append(QuarterItems(quarter, as_of, end, returns, owners[quarter]))
    return items


def chunks(tickers: list[str], size: int) -> list[list[str]]:
    return [tickers[i:i + size] for i in range(0, len(tickers), size)]


def recall_request(model: str, prompt: RecallPrompt, item: QuarterItems, tickers: list[str], temperature: float,
                   max_tokens: int | None) -> LLMRequest:
    """The request for ``tickers`` of one quarter. Its context (the quarter, tickers and buckets, never the returns)
    is what the simulated provider answers from; a real provider never sees it."""
    user = prompt.template.render(quarter=item.quarter, as_of=item.as_of, end=item.end, tickers=tickers,
                                  buckets=prompt.buckets(), schema=schema_outline(json_schema(RecallAnswer)))
    return LLMRequest(model=model, temperature=temperature, max_tokens=max_tokens,
                      response_schema=json_schema(RecallAnswer),
                      messages=[Message(role="system", content=prompt.spec.system), Message(role="user", content=user)],
                      context={"probe": "recall", "quarter": item.quarter, "as_of": item.as_of, "end": item.end,
                               "tickers": tickers, "buckets": list(BUCKETS), "edges_pct": prompt.spec.edges_pct})


def recall_validator(tickers: list[str]):
    """The gateway's check of one answer: every ticker asked, once, and no other (written for the model to read)."""
    asked = set(tickers)

    def validate(content: str, spec: ModelSpec) -> RecallAnswer:
        answer = parse_json(content, RecallAnswer)
        named = [a.ticker for a in answer.answers]
        dupes = sorted({t for t in named if named.count(t) > 1})
        outside = sorted(set(named) - asked)
        missing = sorted(asked - set(named))
        problems = ([f"tickers answered more than once: {', '.join(dupes)}"] if dupes else []) + \
                   ([f"tickers that were not asked: {', '.join(outside)}"] if outside else []) + \
                   ([f"tickers missing: {', '.join(missing)}"] if missing else [])
        if problems:
            raise OutputInvalid("; ".join(problems) + f". Answer each of these exactly once: {', '.join(tickers)}")
        return answer
    return validate


def check_model(model: str) -> None:
    if "/" not in model:
        raise InputError("--model", f"{model!r} is not a model string", "write e.g. openai/gpt-4o-mini or local/gemma3-270m")
    if model.startswith("rules/"):
        raise InputError("--model", f"{model} is rule-based: it reads only the memo and remembers no prices, so its recall "
                         "is nothing by construction", "probe a language model (e.g. openai/gpt-4o-mini, local/gemma3-270m); "
                         "to try the probe offline, point it at `madbench sim serve` with --send-context")


class ProbeFailed(Exception):
    """Some requests of a probe got no valid answer (the answers that did come are cached: a rerun resumes)."""


async def ask_model(gateway: Gateway, spec: ModelSpec, prompt: RecallPrompt, items: list[QuarterItems], temperature: float,
                    max_tokens: int | None) -> list[tuple[QuarterItems, Completion]]:
    """Every request for one model, side by side (the gateway's limiter paces them); all settle before a failure is
    raised, so every answer that came is cached."""
    jobs = [(item, chunk) for item in items for chunk in chunks(item.tickers, prompt.spec.max_tickers_per_request)]
    calls = [gateway.complete(recall_request(spec.model, prompt, item, chunk, temperature, max_tokens), spec,
                              recall_validator(chunk)) for item, chunk in jobs]
    settled = await asyncio.gather(*calls, return_exceptions=True)
    for outcome in settled:  # a bug is a bug: re-raised as it is
        if isinstance(outcome, BaseException) and not isinstance(outcome, GatewayFailure):
            raise outcome
    failed = [(item, o) for (item, _), o in zip(jobs, settled, strict=True) if isinstance(o, GatewayFailure)]
    if failed:
        item, first = failed[0]
        raise ProbeFailed(f"{spec.model}: {len(failed)} of {len(jobs)} requests got no valid answer; the first "
                          f"({item.quarter}): {first.reason}")
    return [(item, c) for (item, _), c in zip(jobs, settled, strict=True) if isinstance(c, Completion)]  # every one, now


def observation_rows(model: str, item: QuarterItems, completion: Completion, prompt: RecallPrompt,
                     registry: CutoffRegistry, temperature: float) -> list[dict]:
    """One row per ticker answered: the answer, the realised return and its bucket, and the model's cutoff."""
    cutoff = registry.cutoff_of(completion.model_used)
    post = registry.post_cutoff(item.quarter, [completion.model_used])
    rows = []
    for a in completion.value.answers:
        ret = item.returns_pct[a.ticker]
        truth = int(bucket_index([ret], prompt.spec.edges_pct)[0])
        guess = BUCKETS.index(a.bucket)
        rows.append({"model": model, "model_used": completion.model_used, "quarter": item.quarter, "ticker": a.ticker,
                     "scenario_ids": ",".join(item.scenario_ids.get(a.ticker, [])), "as_of": item.as_of, "end": item.end,
                     "realised_return_pct": ret, "realised_bucket": BUCKETS[truth], "answer_bucket": a.bucket,
                     "realised_index": truth, "answer_index": guess, "hit": guess == truth,
                     "cutoff": None if cutoff is None else str(cutoff), "post_cutoff": post, "cached": completion.cached,
                     "prompt_digest": prompt.digest, "temperature": temperature})
    return rows


def summarise_recall(observations: pd.DataFrame) -> pd.DataFrame:
    """Per model: one row per quarter, then pooled rows: "pre-cutoff" and "post-cutoff" (quarters on each side of
    the model's registered cutoff, when it has one) and "all"."""
    k = len(BUCKETS)
    parts = []
    for _, obs in observations.groupby("model", sort=False):
        per_quarter = recall_table(obs, ["model", "quarter"], k)
        per_quarter.insert(2, "post_cutoff", [obs.loc[obs["quarter"] == q, "post_cutoff"].iloc[0] for q in per_quarter["quarter"]])
        known = obs[obs["post_cutoff"].notna()]
        sides = recall_table(known.assign(quarter=["post-cutoff" if v else "pre-cutoff" for v in known["post_cutoff"]]),
                             ["model", "quarter"], k)
        sides.insert(2, "post_cutoff", sides["quarter"] == "post-cutoff")
        pooled = recall_table(obs.assign(quarter="all"), ["model", "quarter"], k)
        pooled.insert(2, "post_cutoff", None)
        blocks = [per_quarter, sides.sort_values("quarter", ascending=False), pooled]
        table = pd.concat([b for b in blocks if len(b)], ignore_index=True)  # an empty block would make columns object
        table["post_cutoff"] = table["post_cutoff"].astype(object).where(table["post_cutoff"].notna(), None)
        table.insert(2, "cutoff", obs["cutoff"].iloc[0])
        parts.append(table)
    return pd.concat(parts, ignore_index=True)


async def probe_recall(gateway: Gateway, specs: list[ModelSpec], scenarios: list[Scenario], pack: Pack, prompt: RecallPrompt,
                       registry: CutoffRegistry, temperature: float = 0.0, max_tokens: int | None = None,
                       where: str = "--scenarios") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(observations, summary) of every model in ``specs`` on the quarters and tickers of ``scenarios``."""
    for spec in specs:
        check_model(spec.model)
    items = quarter_items(scenarios, pack, where)
    rows = []
    for spec in specs:
        for item, completion in await ask_model(gateway, spec, prompt, items, temperature, max_tokens):
            rows += observation_rows(spec.model, item, completion, prompt, registry, temperature)
    observations = pd.DataFrame(rows)
    return observations, summarise_recall(observations)


def write_recall(out: str | Path, observations: pd.DataFrame, summary: pd.DataFrame) -> list[Path]:
    """Both tables under ``out``, each written whole or not at all."""
    out = Path(out)
    return [atomic_write(out / name, frame_writer(frame))
            for name, frame in ((OBSERVATIONS_FILE, observations), (SUMMARY_FILE, summary))]
