"""The CLI as a user runs it: exit codes, one-line errors, nothing half-written."""

import os
import socket
import subprocess
import sys
import time

import pandas as pd

from madbench.runner.cli import main
from tests.conftest import SHARED_MARKET, SHARED_PAPER, requires_shared


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "madbench.runner.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_memo_cli_and_errors(make_pack, tmp_path, capsys):
    pack = make_pack()
    sc = tmp_path / "s.yaml"
    sc.write_text("scenarios:\n- id: x\n  invest_quarter: 2022Q2\n  tickers: [AAA, ZZZ]\n  constraints: {allow_cash: true}\n")
    assert main(["memo", "x", "--scenarios", str(sc), "--pack", str(pack)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scenarios[0].tickers" in err[0] and "ZZZ" in err[0] and str(sc) in err[0]
    sc.write_text("scenarios:\n- id: x\n  invest_quarter: 2022Q2\n  tickers: [AAA, BBB]\n  constraints: {allow_cash: true}\n")
    assert main(["memo", "x", "--scenarios", str(sc), "--pack", str(pack)]) == 0
    assert "[AAA-RET60]" in capsys.readouterr().out


def test_pack_from_environment(make_pack, tmp_path):
    pack = make_pack()
    sc = tmp_path / "s.yaml"
    sc.write_text("scenarios:\n- id: x\n  invest_quarter: 2022Q2\n  tickers: [AAA]\n  constraints: {allow_cash: true}\n")
    r = run("memo", "x", "--scenarios", str(sc), "--json", env={"MADBENCH_PACK": str(pack)})
    assert r.returncode == 0, r.stderr
    assert '"id": "AAA-PX"' in r.stdout


def test_data_check_flags_problems(make_pack, tmp_path):
    def damage(t):
        p = t["prices"]
        t["prices"] = pd.concat([p, p.iloc[[5]]]).drop(p[(p.ticker == "AAA")].index[100:103])

    bad = make_pack(edit=damage)
    r = run("data", "check", "--pack", str(bad))
    assert r.returncode == 2
    assert "1 duplicate rows" in r.stdout and "AAA misses 3 trading days" in r.stdout
    assert len(r.stderr.strip().splitlines()) == 1
    assert run("data", "check", "--pack", str(make_pack())).returncode == 0


def test_pack_table_with_missing_columns(make_pack, capsys):
    pack = make_pack(edit=lambda t: t.update(universe=t["universe"].drop(columns=["sector"])))
    assert main(["data", "check", "--pack", str(pack)]) == 2
    out = capsys.readouterr()
    assert "universe.parquet" in out.out and "missing columns ['sector']" in out.out


def test_fetch_without_network_fails_fast(tmp_path, monkeypatch, capsys):
    import madbench.data.market.fetch as fetch
    with socket.socket() as s:  # a port nothing listens on: connection refused, like a dead network
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(fetch, "PROBE_HOSTS", (("127.0.0.1", port),))
    t0 = time.monotonic()
    rc = main(["data", "fetch", "--tickers", "AAPL", "--start", "2020-01-01", "--end", "2020-12-31", "--out", str(tmp_path / "p")])
    assert rc == 2 and time.monotonic() - t0 < 15
    assert "no network" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_scenarios_make_writes_nothing_on_bad_input(make_pack, tmp_path):
    out = tmp_path / "s.yaml"
    r = run("scenarios", "make", "--quarters", "2031Q1:2031Q2", "--count", "3", "--out", str(out), "--pack", str(make_pack()))
    assert r.returncode == 2 and not out.exists()
    assert len(r.stderr.strip().splitlines()) == 1


@requires_shared
def test_all_35_paper_scenarios_build_memos_on_the_market_pack_with_the_papers_evidence():
    from madbench.data.market.pack import load_pack
    from madbench.data.memo import build_memo
    from madbench.data.scenario import load_scenarios
    pack = load_pack(SHARED_MARKET, [SHARED_PAPER])
    scenarios = load_scenarios(SHARED_PAPER / "scenarios_35.yaml")
    tickers = {t for s in scenarios for t in s.tickers}
    assert {"AMT", "DAL", "GOOG", "OXY", "SLB"} <= tickers
    # every ticker of the paper is measured on dividend-adjusted closes now (no plain-close fallback)
    assert {pack.price_basis[t] for t in tickers} == {"adj_close"}
    memos = [build_memo(s, pack) for s in scenarios]
    assert len(memos) == 35 and all(m.evidence_ids for m in memos)
    # the paper's evidence is attached: filings, earnings calls or news for some ticker of every memo
    assert all(any(i.source.split(":")[0] in {"filings", "earnings_calls", "news_sentiment"} for i in m.items) for m in memos)


@requires_shared
def test_scenarios_make_on_market_pack(tmp_path):
    out = tmp_path / "m.yaml"
    r = run("scenarios", "make", "--quarters", "2021Q4:2025Q3", "--count", "35", "--seed", "7", "--out", str(out), "--pack", str(SHARED_MARKET))
    assert r.returncode == 0, r.stderr
    assert "mean pairwise Jaccard" in r.stdout and out.exists()
