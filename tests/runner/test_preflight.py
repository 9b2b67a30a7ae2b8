"""Preflight: every problem a batch would hit is named before Ray starts and before any model call."""

import threading
from pathlib import Path

import pytest
import yaml

from madbench.runner.cli import main
from madbench.runner.progress import BatchLine, Progress, eta_s
from madbench.runner.run_report import RunReport
from madbench.sim.http_stub import QuietServer
from tests.runner.test_batch import ROOT, TICKERS, write_batch
from tests.runner.test_input_checks import _Counting


def test_missing_key_bad_parameter_and_unbacktestable_scenario_are_all_named_before_anything_starts(
        make_pack, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("MADBENCH_TEST_KEY", raising=False)
    pack = make_pack(tickers=tuple(TICKERS))  # prices from 2020-01 for about 700 business days
    batch = write_batch(tmp_path, pack, model={"model": "openai/gpt-4o-mini", "api_key_env": "MADBENCH_TEST_KEY",
                                                "fallbacks": ["openai/o3-mini"]})
    spec = yaml.safe_load(batch.read_text())
    scen = yaml.safe_load(Path(spec["scenarios"]["file"]).read_text())
    scen["scenarios"].append({"id": "too-late", "invest_quarter": "2027Q1", "tickers": TICKERS[:2]})
    Path(spec["scenarios"]["file"]).write_text(yaml.safe_dump(scen))
    assert main(["run", str(batch)]) == 2
    err = capsys.readouterr().err
    assert "problem(s) found before any model call" in err
    assert "MADBENCH_TEST_KEY (its api_key_env) is not set" in err       # the model's own key
    assert "openai/o3-mini: no API key: export OPENAI_API_KEY" in err    # its fallback's key
    assert "Only temperature=1 is supported" in err                     # a parameter the fallback refuses
    assert "scenario too-late" in err                                   # not backtestable on this pack
    assert not (tmp_path / "results").exists()                          # nothing was started or written


def test_a_clean_batch_passes_preflight_and_dry_run_prints_the_estimate(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)))
    assert main(["run", str(batch), "--dry-run", "--json"]) == 0
    assert '"expected_calls"' in capsys.readouterr().out


def test_a_template_that_fails_to_render_is_a_preflight_problem(make_pack, tmp_path, capsys, monkeypatch):
    from madbench.debate.profiles import Profile

    def broken(self, phase, **variables):
        raise TypeError("unsupported operand")
    monkeypatch.setattr(Profile, "render", broken)
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)))
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert "propose prompt: TypeError: unsupported operand" in capsys.readouterr().err


def test_an_unwritable_results_directory_is_a_preflight_problem(make_pack, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), results_dir=str(blocker / "results"))
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert "results directory's path runs through a file" in capsys.readouterr().err


@pytest.fixture
def failing_endpoint():
    """An endpoint that answers every request with a 500: there, but failing every call."""
    server = QuietServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_failed_runs_exit_1_with_their_reasons_grouped_and_the_retry_command(make_pack, failing_endpoint, tmp_path,
                                                                            capsys, monkeypatch):
    # A priced model with its key passes preflight and its endpoint answers, but every call there is a 500 (no retries
    # and no outage patience): every call fails, a run failure.
    monkeypatch.setenv("MADBENCH_TEST_KEY", "sk-test-not-a-key")
    dead = {"model": "openai/gpt-4o-mini", "api_base": failing_endpoint, "api_key_env": "MADBENCH_TEST_KEY",
            "retry": {"max_transient_retries": 0, "outage_patience_s": 0}}
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), model=dead, replicates=1,
                        configs=[str(ROOT / "configs/debate/single-causal.yaml")], retries=0)
    assert main(["run", str(batch), "--quiet", "--cache-dir", str(tmp_path / "cache")]) == 1
    err = capsys.readouterr().err
    assert "4 run(s) failed" in err and "4 run(s), e.g." in err and "openai/gpt-4o-mini" in err
    assert f"madbench run {batch} --cache-dir {tmp_path / 'cache'} --retry-failed" in err
    assert main(["status", str(tmp_path / "results" / "t")]) == 0
    assert "4 failed" in capsys.readouterr().out


def test_eta_comes_from_observed_run_durations():
    assert eta_s(10, [], 2) is None
    assert eta_s(10, [4.0, 6.0, 100.0], 2.0) == 10 * 6.0 / 2.0  # the median, so one slow run does not swing it
    assert eta_s(0, [5.0], 1) == 0.0


def test_progress_off_a_terminal_is_one_plain_line_per_interval(tmp_path):
    with open(tmp_path / "log", "w") as log:
        p = Progress(3, BatchLine(budget=1.0), stream=log, interval_s=3600)
        p.show(2)                     # within the interval: nothing
        p.add(RunReport(run_id="r", status="ok", totals={"calls": 4, "cached": 1, "prompt_tokens": 10,
                                                         "completion_tokens": 5, "cost_usd": 0.01}, wall_s=2.0))
        p.show(2, force=True)
        p.close(0)
    lines = (tmp_path / "log").read_text().splitlines()
    assert len(lines) == 2 and "\r" not in "".join(lines)
    assert "1/3 runs: 1 ok, 0 failed" in lines[0] and "of $1.00" in lines[0] and "ETA" in lines[0]


def test_the_batch_line_moves_per_call_with_the_actors_live_counts_before_any_run_settles(tmp_path):
    live = {"spent_usd": 0.0031, "calls": 7, "cached": 0, "failed": 2, "tokens": 900}
    with open(tmp_path / "log", "w") as log:
        p = Progress(3, BatchLine(budget=None), stream=log, interval_s=3600)
        p.poll = lambda: dict(live)
        p.show(3, force=True)
        live.update(calls=12, tokens=1500)  # more calls answered, still no run settled
        p._polled = float("-inf")          # the next line reads the actors again
        p.show(3, force=True)
        p.close(0)
    first, second = (tmp_path / "log").read_text().splitlines()[:2]
    assert "0/3 runs" in first and "(2 failed)" in first and "900 tokens" in first and "$0.0031" in first
    assert "1500 tokens" in second and "calls/s" in second and "— calls/s" not in second
