"""The dry run's estimate as a reader sees it: the table ``madbench run BATCH --dry-run`` prints."""

from __future__ import annotations


def _tokens(n) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e3 else f"{n:.0f}"


def _money(cost, known: float) -> str:
    """A cost, or what is known of it when a model has no price (never shown as 0)."""
    if cost is not None:
        return f"{cost:.2f}"
    return f"≥{known:.2f}" if known > 0 else "unknown"


def _dollars(cost, known: float) -> str:
    """``_money`` with its dollar sign: $1.23, ≥$1.23 or unknown."""
    text = _money(cost, known)
    return "unknown" if text == "unknown" else text.replace("≥", "≥$") if text.startswith("≥") else f"${text}"


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    m = s / 60
    return f"{m:.1f} min" if m < 120 else f"{int(m // 60)} h {int(m % 60):02d} min"


def usd(x: float) -> str:
    """Dollars to the cent, or to 1/100 of a cent below $1 (where cents would round a small batch's figures away)."""
    return f"${x:.2f}" if abs(x) >= 1 else f"${x:.4f}"


def batch_line(t: dict, execution: str) -> str:
    """The batch's expected cost synchronously and through provider batch APIs, side by side."""
    sync, batch = t["cost_usd"], t["cost_batch_usd"]
    now = ("this batch runs in provider batch mode (execution: batch): its cost is the provider batch one, and its wall "
           "time is each phase's batch turnaround (up to the provider's 24 h window) times the phases, not the above"
           if execution == "batch" else "`--provider-batch` or `execution: batch` runs it so; answers within hours instead "
           "of minutes")
    return (f"cost by execution: synchronous {usd(sync)}, provider batch {usd(batch)} (saves {usd(sync - batch)}, "
            f"{1 - batch / sync:.0%}); {now}. Both before prompt caching, which serves repeated prompt prefixes "
            "at a discount (`madbench bench cost` measures it)")


def _config_row(c: dict) -> str:
    n = c["runs"]
    known, worst_known = c["cost_known_part_usd"], c["cost_known_part_usd_worst"]
    return (f"{c['config'][:34]:<34} {n:>5} {c['calls'] / n:>7.1f} /{c['calls_worst'] / n:>6.1f} "
            f"{_tokens(c['prompt_tokens'] / n):>7} /{_tokens(c['completion_tokens'] / n):>6} "
            f"{_money(c['cost_per_scenario_usd'], known / n):>7} /{_money(None if c['cost_usd_worst'] is None else c['cost_usd_worst'] / n, worst_known / n):>6} "
            f"{_money(c['cost_usd'], known):>9} /{_money(c['cost_usd_worst'], worst_known):>8} "
            f"{c['minutes_per_scenario']:>6.1f} /{c['minutes_per_scenario_worst']:>5.1f} {_duration(c['wall_s_alone']):>11}")


def format_table(d: dict) -> str:
    """The dry run's estimate (``madbench.runner.cli.run.dry_run``) as a table: per config (per scenario and in all), then
    the batch, each model, and the rates used."""
    lines: list[str] = []
    out = lines.append
    cal = d["calibration"]
    src = (f"the pilot batch {cal['source']} ({cal['runs']} runs)" if cal else
           "the declared defaults of runner/estimate/assumptions.py (--calibrate-from RESULTS: from a pilot batch)")
    out(f"batch {d['batch']}: {d['runs']} runs, max_in_flight {d['max_in_flight']}; estimated from {src}")
    out(f"{'':<34} {'':>5} {'calls/scenario':>14} {'tokens/scenario':>14} {'$/scenario':>14} {'$ in all':>18} "
        f"{'min/scenario':>12} {'wall':>11}")
    head = (f"{'config':<34} {'runs':>5} {'exp':>7} /{'worst':>6} {'in':>7} /{'out':>6} {'exp':>7} /{'worst':>6} "
            f"{'exp':>9} /{'worst':>8} {'exp':>6} /{'worst':>5} {'(alone)':>11}")
    out(head)
    out("-" * len(head))
    for c in d["configs"]:
        out(_config_row(c))
    out("-" * len(head))
    t = d["total"]
    worst_known = t["cost_known_part_usd_worst"]
    out(f"batch: {t['runs']} runs, {t['calls']:.0f} calls (worst {t['calls_worst']:.0f}; {t['attempts']:.0f} HTTP attempts "
        f"with validation retries), {_tokens(t['prompt_tokens'])} tokens in / {_tokens(t['completion_tokens'])} out, "
        f"{_dollars(t['cost_usd'], t['cost_known_part_usd'])} (worst {_dollars(t['cost_usd_worst'], worst_known)}); "
        f"wall time {_duration(d['batch_wall_s'])}, bound by {d['bottleneck']}")
    if t["cost_usd"] and (d["execution"] == "batch" or not d.get("provider_batch_unsupported")):
        out(batch_line(t, d["execution"]))
    elif t["cost_usd"]:  # offered only where every model it calls has a batch API madbench can use
        out(f"provider batch mode: not available for this batch ({d['provider_batch_unsupported'][0]})")
    models: dict[str, list] = {}
    for row in d["by_model"]:
        m = models.setdefault(row["model"], [0.0, 0.0, 0.0, 0.0, True])
        m[0] += row["calls"]
        m[1] += row["prompt_tokens"]
        m[2] += row["completion_tokens"]
        if row["cost_usd"] is None:
            m[4] = False
        else:
            m[3] += row["cost_usd"]
    for model, (n, p, c, cost, known) in models.items():
        out(f"  {model:<32} {n:>9.0f} calls {_tokens(p):>8} in {_tokens(c):>8} out  "
            + (f"${cost:.2f}" if known else "unknown price (none in litellm's cost map, none declared)"))
    out("expected case: " + ", ".join(f"{k} {v:.2f}" for k, v in d["rates"].items())
        + "; worst case: every intervention fires to its max_retries in every round, no early stop")
    if cal:
        out("rates from: " + "; ".join(f"{k} {v}" for k, v in cal["rate_sources"].items()))
    if d["models_without_price"]:
        out(f"unknown price for {', '.join(d['models_without_price'])}: costs that include them show what is known (≥) "
            "or unknown, never $0; declare a price on the model's tier in its routing profile (price: "
            "{input_usd_per_mtok: …, output_usd_per_mtok: …})")
    return "\n".join(lines)
