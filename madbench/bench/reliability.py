"""`madbench bench ends` and `madbench bench kills`: the runner's guarantees, measured as a user meets them.

Both start `madbench run` in its own process, as a user would, against the simulated provider over real HTTP.

``ends``: a batch whose every answer is invalid (the simulator answers ``{"answer": ...}`` to a prompt without
madbench's context, which no turn accepts) with ``retries: 1``, so each failed run is resubmitted once in the same
invocation: the attempt that used to hang. It runs ``tries`` times, each with a fresh results directory and cache,
beside ``load`` busy processes. A try that has not ended after ``timeout_s`` is killed and counted as hung. Each
try's exit status, wall time and runs (failed, with a reason) are reported.

``kills``: a batch under a ``max_cost_usd`` cap whose driver is killed with SIGKILL ``kills`` times, each time a
few calls after it started sending (so calls are in flight), then run to its end. What the provider billed (every
answer it sent, priced at the model's list prices) is set against what the batch's ledger (budget.json) says it
spent. The ledger journals each request before it goes out; the runner actor that sent it appends what it billed
once the answer comes (it outlives its killed driver for a few seconds), and a request with no such line (its
answer never came) counts at its reserved maximum. So the ledger never says less than the bill, says more only by
what requests cut off at a kill could have cost beyond their bill, and the bill never passes the cap.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from madbench.data.errors import InputError
from madbench.data.market.pack import SHARED_PAPER, resolve_pack_dir
from madbench.data.paths import CONFIGS_DIR
from madbench.gateway.providers.litellm_provider import token_cost
from madbench.results import read_manifest
from madbench.runner.budget import BUDGET_FILE, BUDGET_SETTLED, BudgetRecord, read_budget, read_settlements
from madbench.runner.exit_codes import EXIT_RUNS_FAILED
from madbench.sim.provider import SimConfig, SimProvider

#: What `ends` asks of every try: it exits with the failed-runs status within this many seconds.
ENDS_WITHIN_S = 120.0
#: The paper's six scenarios of configs/batches/leakage.yaml, whose filings and calls the blind memo masks.
BLIND_SCENARIOS = ["2022Q4_tech", "2025Q1_tech", "2022Q3_rand3_1", "2023Q2_rand3_2", "2022Q1_rand3_1", "2024Q1_rand3_2"]
#: A model in litellm's offline cost map, so that the simulator's answers have a price.
PRICED_MODEL = "openai/gpt-4o-mini"


@contextlib.contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """``processes`` busy loops for the length of the block."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def start_driver(batch: Path, log: Path) -> subprocess.Popen:
    """`madbench run BATCH --quiet` in a session of its own, its output in ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "madbench.runner.cli", "run", str(batch), "--quiet"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGKILL the driver's whole session (its local Ray with it): what is left of a hung try."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def write_batch(folder: Path, fields: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "batch.yaml"
    path.write_text(yaml.safe_dump({"results_dir": str(folder / "results"), "cache_dir": str(folder / "cache"),
                                    "replicates": 1, "workers": 2} | fields))
    return path


def _market_ids(n: int | None = None) -> list[str]:
    """The first ``n`` scenario ids of configs/scenarios/market-35.yaml (all of them: None)."""
    scenarios = yaml.safe_load((CONFIGS_DIR / "scenarios" / "market-35.yaml").read_text())["scenarios"]
    return [s["id"] for s in scenarios[:n]]


def invalid_batch(folder: Path, api_base: str, blind: bool, pack: Path, evidence: Path) -> Path:
    """4 runs of causal-debate-3 on market-35, or the blind config on the paper's 6 scenarios; every answer invalid."""
    model = {"model": "openai/madbench-sim", "api_base": api_base, "limits": {"max_concurrency": 8}}
    if blind:
        scenarios = {"file": str(evidence / "scenarios_35.yaml"), "ids": BLIND_SCENARIOS}
        extra = {"configs": [str(CONFIGS_DIR / "debate" / "causal-debate-3-blind.yaml")], "evidence": [str(evidence)]}
    else:
        scenarios = {"file": str(CONFIGS_DIR / "scenarios" / "market-35.yaml"), "ids": _market_ids(4)}
        extra = {"configs": [str(CONFIGS_DIR / "debate" / "causal-debate-3.yaml")]}
    return write_batch(folder, {"name": "invalid", "scenarios": scenarios, "model": model, "pack": str(pack),
                                "retries": 1, "max_in_flight": 8} | extra)


def _try_ends(batch: Path, timeout_s: float) -> dict[str, Any]:
    root = batch.parent / "results" / "invalid"
    t0 = time.monotonic()
    proc = start_driver(batch, batch.parent / "driver.log")
    try:
        rc: int | None = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        rc = None
    wall = time.monotonic() - t0
    manifest = read_manifest(root) if (root / "manifest.json").exists() else None
    runs = manifest.runs if manifest is not None else []
    return {"exit": rc, "wall_s": round(wall, 1), "load_1min": round(os.getloadavg()[0], 1),
            "state": manifest.state if manifest is not None else None, "runs": len(runs),
            "failed_with_reason": sum(r.status == "failed" and bool(r.error) for r in runs),
            "attempts": sorted({r.attempts for r in runs}), "pending": sum(r.status == "pending" for r in runs),
            "log": str(batch.parent / "driver.log")}


def bench_ends(tries: int, blind: bool, load: int, timeout_s: float, pack: str | None, evidence: str | None,
               keep: str | None = None) -> dict[str, Any]:
    """Run the all-invalid batch ``tries`` times beside ``load`` busy processes (module docstring)."""
    if keep is not None and Path(keep).exists() and (not Path(keep).is_dir() or any(Path(keep).iterdir())):
        raise InputError("--keep", f"{keep} is not an empty directory: each try must start from nothing (an earlier "
                         "try's results would be resumed)", "name a new or empty directory")
    pack_dir, evidence_dir = resolve_pack_dir(pack), Path(evidence) if evidence else SHARED_PAPER
    if not pack_dir.is_dir():
        raise InputError("--pack", f"{pack_dir} is not a directory", "give a data pack's directory")
    if blind and not (evidence_dir / "scenarios_35.yaml").is_file():
        what = "holds no scenarios_35.yaml" if evidence_dir.is_dir() else "is not a directory"
        raise InputError("--evidence", f"{evidence_dir} {what}: --blind runs the paper's scenarios",
                         "give the paper's evidence directory (../shared/data/paper)")
    rows = []
    if keep is not None:
        Path(keep).mkdir(parents=True, exist_ok=True)
    with (contextlib.nullcontext(keep) if keep else tempfile.TemporaryDirectory()) as tmp, SimProvider() as sim, \
            cpu_load(load):
        for i in range(tries):
            batch = invalid_batch(Path(tmp) / f"try-{i:02d}", sim.url, blind, pack_dir, evidence_dir)
            rows.append(_try_ends(batch, timeout_s))
            if keep is None:
                rows[-1]["log"] = None  # the temporary directory goes with the benchmark
    good = [r for r in rows if r["exit"] == EXIT_RUNS_FAILED and r["wall_s"] <= ENDS_WITHIN_S
            and r["runs"] and r["failed_with_reason"] == r["runs"] and r["state"] == "finished"]
    walls = [r["wall_s"] for r in rows]
    return {"batch": "causal-debate-3-blind on 6 paper scenarios" if blind else "causal-debate-3 on 4 market-35 scenarios",
            "tries": tries, "load_processes": load, "ended": sum(r["exit"] is not None for r in rows),
            f"ok_within_{ENDS_WITHIN_S:.0f}s": len(good), "wall_s": {"min": min(walls), "median": statistics.median(walls),
                                                                  "max": max(walls)}, "tries_detail": rows}


def priced_batch(folder: Path, api_base: str, cap: float, scenarios: int, pack: Path) -> Path:
    """causal-debate-3 on the first ``scenarios`` of market-35 at a priced model's name, valid answers, a cap."""
    return write_batch(folder, {
        "name": "kills", "scenarios": {"file": str(CONFIGS_DIR / "scenarios" / "market-35.yaml"), "ids": _market_ids(scenarios)},
        "configs": [str(CONFIGS_DIR / "debate" / "causal-debate-3.yaml")],
        "model": {"model": PRICED_MODEL, "api_base": api_base, "send_context": True, "limits": {"max_concurrency": 8}},
        "pack": str(pack), "retries": 0, "max_in_flight": 4, "max_cost_usd": cap})


def billed_usd(sim: SimProvider) -> float:
    """What the simulator billed: every answer it sent, at the priced model's list prices (cached tokens discounted)."""
    costs = [token_cost(PRICED_MODEL, p, c, cached_tokens=k) for _, p, c, k in list(sim.stats.billed)]
    if any(c is None for c in costs):
        raise RuntimeError(f"{PRICED_MODEL} has no price in litellm's cost map: the bill cannot be priced")
    return sum(c for c in costs if c is not None)


def _wait_for_requests(sim: SimProvider, proc: subprocess.Popen, n: int, timeout_s: float) -> bool:
    """True once the simulator has had ``n`` more requests; False if the driver exited first."""
    goal, deadline = sim.stats.requests + n, time.monotonic() + timeout_s
    while sim.stats.requests < goal:
        if proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            raise TimeoutError(f"the driver sent fewer than {n} requests in {timeout_s:.0f} s")
        time.sleep(0.02)
    return True


def _settle(sim: SimProvider, quiet_s: float = 3.0) -> None:
    """Wait until no request has arrived for ``quiet_s`` (an orphaned actor's last calls)."""
    seen = -1
    while seen != sim.stats.requests:
        seen = sim.stats.requests
        time.sleep(quiet_s)


def _after_kill(root: Path, cap: float) -> dict[str, Any]:
    """What the killed invocation left journaled in flight (each counted at what its actor saw billed after the kill,
    else its maximum until its line comes), and the ledger with it, as the next driver reads them at its start."""
    path = root / BUDGET_FILE
    in_flight = BudgetRecord.model_validate_json(path.read_bytes()).in_flight_usd if path.exists() else {}
    billed = read_settlements(root / BUDGET_SETTLED, set(in_flight))
    return {"left_in_flight": len(in_flight), "answered_before_restart": len(billed),
            "in_flight_counted_usd": round(sum(billed.get(c, v) for c, v in in_flight.items()), 6),
            "ledger_usd": round(read_budget(root, cap).spent_usd, 6)}


def bench_kills(kills: int, cap: float, every: int, scenarios: int, pack: str | None,
                latency_s: float = 0.5, restart_after_s: float = 0.0) -> dict[str, Any]:
    """Kill the capped batch's driver ``kills`` times, ``every`` requests into each invocation, then run it to its end.
    Each next driver starts ``restart_after_s`` after the kill: at once by default, before the killed one's actors
    have had their answers, whose lines then come after the new start has read the journal."""
    most = len(_market_ids())
    if not 1 <= scenarios <= most:
        raise InputError("--runs", f"`kills` takes 1 to {most} scenarios of market-35, got {scenarios}",
                         "give a count in that range")
    pack_dir = resolve_pack_dir(pack)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, SimProvider(SimConfig(latency_median_s=latency_s, seed=7)) as sim:
        batch = priced_batch(Path(tmp), sim.url, cap, scenarios, pack_dir)
        root, log = Path(tmp) / "results" / "kills", Path(tmp) / "driver.log"
        proc = None
        try:
            for _ in range(kills):
                proc = start_driver(batch, log)
                if not _wait_for_requests(sim, proc, every, timeout_s=600):
                    rows.append({"killed": False, "exit": proc.returncode})
                    break  # it ended (the cap, or every run done) before the kill
                unanswered = sim.stats.requests - len(sim.stats.billed)
                os.kill(proc.pid, signal.SIGKILL)  # the driver alone, as a crash would: its Ray is left to notice
                proc.wait()
                time.sleep(restart_after_s)
                rows.append({"killed": True, "requests_unanswered_at_kill": unanswered, **_after_kill(root, cap),
                             "billed_usd": round(billed_usd(sim), 6)})
            proc = start_driver(batch, log)
            rc = proc.wait(timeout=1800)
        finally:
            if proc is not None and proc.poll() is None:
                stop_group(proc)  # a timeout or an error here leaves no driver (and its Ray) behind
        _settle(sim)
        ledger = read_budget(root, cap)
        billed = billed_usd(sim)
    return {"kills": sum(r["killed"] for r in rows), "cap_usd": cap, "billed_usd": round(billed, 6),
            "ledger_usd": round(ledger.spent_usd, 6), "ledger_minus_billed_usd": round(ledger.spent_usd - billed, 6),
            "billed_within_cap": billed <= cap + 1e-12, "ledger_not_below_bill": ledger.spent_usd >= billed - 1e-9,
            "final_exit": rc, "reached": ledger.reached, "invocations": rows}
