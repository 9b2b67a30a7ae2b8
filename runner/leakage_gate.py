"""A batch's leakage audit before its debates (``leakage_audit:`` in a batch file): is the blind arm blind?

Before any debate of a batch with a blind config, the driver runs `madbench leakage audit` on the batch's own blind
memos (its scenarios, with the blind options of its blind config): the residue and the macro block's k-anonymity
offline, and the identification probe through the gateway with every model the blind config reaches (cached under
the batch's cache, held to its ``max_cost_usd`` and recorded in its budget.json, rate-limited by each model's
limits). A ``rules/…`` model answers "unknown" (``leakage_audit.rule_identify_answer``), so an offline batch runs
the probe too and finds nothing, by construction.

The audit is recorded in ``<results>/leakage_audit/``: residue.parquet, identify.parquet, identify_summary.parquet
(each written atomically), then audit.json (``AuditRecord``), written last: a reader that finds it finds the tables
it summarises. A model leaks when the lower end of the Clopper-Pearson 95% interval of its hit rate (assets, or the
quarter, over all memos) lies above chance, a uniform guess among the candidates; then ``on_leak: refuse`` (the
default) stops the batch before any debate, naming the model, the target and the figures, and ``on_leak: warn``
prints that on stderr and runs it. The two targets and the models are not corrected for multiplicity: a gate that
refuses more readily is the cautious one.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pandas as pd

from madbench.data.atomic import atomic_write, atomic_write_text, frame_writer
from madbench.data.blind import BlindOptions
from madbench.data.errors import InputError
from madbench.data.macro_anonymity import reference_blocks
from madbench.data.market.pack import Pack
from madbench.data.residue import RESIDUE_KINDS
from madbench.data.scenario import Scenario
from madbench.debate.config import DebateConfig
from madbench.eval.stats.identification import identify_summary
from madbench.gateway import ResponseCache
from madbench.gateway.errors import BudgetExhausted
from madbench.results.layout import LEAKAGE_AUDIT
from madbench.results.leakage_record import RECORD, AuditRecord, ModelAudit, leak_line
from madbench.runner.batch import LeakageAuditSpec
from madbench.runner.budget import JournaledBudget, read_budget_told
from madbench.runner.leakage_audit import ProbeFailed, blind_memos, identify, residue_table
from madbench.runner.lock import ResultsLock
from madbench.runner.preflight import probe_calls
from madbench.runner.wiring import build_gateway


def model_audits(summary: pd.DataFrame) -> list[ModelAudit]:
    """The all-memo rows of each model's ``identify_summary``."""
    rows = summary[summary["group"] == "all"]
    return [ModelAudit(model=r.model, target=r.target, memos=int(r.memos), trials=int(r.trials), hits=int(r.hits),
                       rate=float(r.rate), chance=float(r.chance), cp_low=float(r.cp_low), cp_high=float(r.cp_high),
                       leaks=bool(r.cp_low > r.chance)) for r in rows.itertuples()]


def audit_batch(configs: list[DebateConfig], scenarios: list[Scenario], pack: Pack, root: Path, where: str,
                setting: LeakageAuditSpec, cache_dir: Path | None, cap_usd: float | None,
                quiet: bool = False) -> AuditRecord:
    """Audit the blind memos of ``configs``' blind arm on ``scenarios``, record it under ``root``, and refuse (an
    InputError) or warn per ``setting`` when a model beats chance. ``cache_dir`` None:
    the cache is not on this machine (the Ray client): the probe is sent uncached. ``quiet``: no lines on stderr but its
    warnings (none when the probe starts, when it finds nothing, or on how a crash's calls in flight were counted)."""
    blind = [c for c in configs if c.blind.enabled]
    if not blind:
        raise InputError(where, "leakage_audit: no config of the batch is blind, so there is no blind memo to audit",
                         "add a blind config (`blind: true`), or drop leakage_audit")
    options = {c.blind.model_dump_json(): c.blind for c in blind}
    if len(options) > 1:
        raise InputError(where, f"leakage_audit: the blind configs differ in their blind options ({', '.join(options)}); "
                         "the audit reads one set of blind memos", "give the blind configs the same `blind:` options, or "
                         "drop leakage_audit and run `madbench leakage audit` on each")
    (opts,) = options.values()
    with ResultsLock(root, "madbench run (leakage audit)"):
        record, tables = _audit(blind, scenarios, pack, root, opts, setting, cache_dir, cap_usd, quiet)
        out = root / LEAKAGE_AUDIT
        for name, frame in tables.items():
            atomic_write(out / f"{name}.parquet", frame_writer(frame))
        atomic_write_text(out / RECORD, record.model_dump_json(indent=1) + "\n")  # last: the tables are there
    lines = [leak_line(p) for p in record.leaks]
    if record.decision == "refused":
        raise InputError(where, "leakage_audit: the blind memos are recognised: " + "; ".join(lines) + f" (recorded in "
                         f"{out / RECORD}); no debate was started", "blind more (`text: drop`, `sectors: drop`), or set "
                         "leakage_audit.on_leak: warn to run the batch anyway")
    for line in lines:
        print(f"madbench: warning: leakage audit: {line} (on_leak: warn, so the batch runs)", file=sys.stderr)
    if not lines and not quiet:
        print(f"madbench: leakage audit: clear, no model identifies the blind memos beyond chance (recorded in "
              f"{out / RECORD})", file=sys.stderr, flush=True)
    return record


def _audit(blind: list[DebateConfig], scenarios: list[Scenario], pack: Pack, root: Path, options: BlindOptions,
           setting: LeakageAuditSpec, cache_dir: Path | None, cap_usd: float | None, quiet: bool
           ) -> tuple[AuditRecord, dict[str, pd.DataFrame]]:
    memos = blind_memos(scenarios, pack, options)
    reference = reference_blocks(pack, options)
    residue = residue_table(memos, reference)
    calls = probe_calls(blind)  # each at a temperature the model takes, as the preflight checked
    spent = read_budget_told(root, cap_usd, quiet)
    if spent.reached:
        raise InputError(root, f"leakage_audit: the batch stopped at its budget of ${cap_usd:g} (${spent.spent_usd:.4f} "
                         "spent), so the probe cannot run and no debate starts", "raise max_cost_usd (or remove it)")
    budget = JournaledBudget(root, spent)  # each call journaled in budget.json as it goes: a kill loses none
    if not quiet:
        print(f"madbench: leakage audit: {', '.join(s.model for s, _ in calls)} asked to identify {len(memos)} blind "
              "memo(s) before any debate starts", file=sys.stderr, flush=True)
    cache = ResponseCache(cache_dir) if cache_dir is not None else None
    try:
        gateway = build_gateway(cache=cache, budget=budget)

        async def probe() -> list[pd.DataFrame]:  # one event loop: the gateway's limiters belong to it
            return [await identify(gateway, spec, memos, pack, t) for spec, t in calls]
        obs = asyncio.run(probe())
    except ProbeFailed as exc:
        raise InputError(root, f"leakage_audit: the identification probe failed: {exc}", "run the same command again "
                         "(answers that came are cached), or drop leakage_audit from the batch") from None
    except BudgetExhausted as exc:
        raise InputError(root, f"leakage_audit: the probe stopped at the batch's budget: {exc}; no debate was started",
                         "raise max_cost_usd (or remove it)") from None
    finally:
        if cache is not None:
            cache.close()
    identified = pd.concat(obs, ignore_index=True)
    summary = pd.concat([identify_summary(g).assign(model=m) for m, g in identified.groupby("model", sort=True)],
                        ignore_index=True)
    probes = model_audits(summary)
    leaks = any(p.leaks for p in probes)
    decision = "clear" if not leaks else "refused" if setting.on_leak == "refuse" else "warned"
    quarters = list(reference)
    record = AuditRecord(options=options.model_dump(exclude={"enabled"}), on_leak=setting.on_leak, decision=decision,
                         memos=len(memos), residue={k: int(residue[k].sum()) for k in RESIDUE_KINDS},
                         macro_k_min=int(residue["macro_k"].min()), macro_k_median=float(residue["macro_k"].median()),
                         reference=f"{quarters[0]}-{quarters[-1]} ({len(quarters)} quarters)" if quarters else "none",
                         probes=probes, written=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return record, {"residue": residue, "identify": identified, "identify_summary": summary}
