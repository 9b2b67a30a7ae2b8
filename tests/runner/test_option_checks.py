"""Every option is handled before the work: an endpoint no call could reach, an output path that cannot be written, a
benchmark size past the machine, options that contradict or repeat each other, and a key given where a variable's
name belongs are each one line on stderr naming the option, exit 2, no request sent and nothing written."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from madbench.runner.cli import main
from madbench.sim.http_stub import QuietServer
from tests.conftest import errors_only
from tests.runner.test_batch import ROOT, TICKERS, write_batch
from tests.runner.test_input_checks import KEY_ENV, paid_batch
from tests.runner.test_one_line_errors import _as_unprivileged

#: Shaped like a key, given where a variable's name belongs: it must never be printed.
KEY = "sk-proj-abcdef0123456789"
QUARTERS = ["2021Q1", "2021Q2"]


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # argparse's own errors exit from the parser
        return int(stop.code)


def one_line(capsys) -> str:
    err = errors_only(capsys.readouterr().err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


class _Answering(http.server.BaseHTTPRequestHandler):
    """Counts requests by method and answers each with ``status``."""

    status = 404
    hits: list[str] = []

    def _any(self):
        type(self).hits.append(self.command)
        self.send_response(type(self).status)
        self.end_headers()

    do_GET = do_POST = _any

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    """A local HTTP endpoint answering 404 to everything (set ``.status`` for another answer), counting requests."""
    handler = type("Handler", (_Answering,), {"hits": [], "status": 404})
    server = QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    server.shutdown()
    server.server_close()


def closed_port() -> int:
    """A local port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scenarios_file(tmp_path: Path) -> Path:
    path = tmp_path / "scenarios.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [{"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS[:3]}
                                                  for q in QUARTERS]}))
    return path


# -- 1. endpoints


@pytest.mark.parametrize("where", ["batch", "set", "dry-run"])
def test_an_api_base_that_is_no_url_is_refused_at_load_on_every_path(where, make_pack, endpoint, tmp_path, capsys,
                                                                       monkeypatch):
    url, server = endpoint
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-key")
    pack = make_pack(tickers=tuple(TICKERS))
    batch = paid_batch(tmp_path, pack, "htp:/nowhere" if where != "set" else url)
    argv = {"batch": [], "set": ["--set", "agents.api_base=not a url"], "dry-run": ["--dry-run"]}[where]
    assert main(["run", str(batch), *argv]) == 2
    err = one_line(capsys)
    assert "api_base: is not an http(s) URL with a host" in err and ("--set" in err) == (where == "set")
    assert server.hits == [] and not (tmp_path / "results").exists()


@pytest.mark.parametrize("dead,problem", [
    ("refused", "the connection is refused (nothing listens there)"),
    ("dns", "its host name nonexistent.invalid does not resolve (DNS)"),
    ("404", "answers 404 Not Found at"),
])
def test_a_dead_endpoint_is_named_after_one_probe_not_after_minutes_of_retries(dead, problem, make_pack, endpoint,
                                                                                tmp_path, capsys, monkeypatch):
    url, server = endpoint
    api_base = {"refused": f"http://127.0.0.1:{closed_port()}/v1", "dns": "http://nonexistent.invalid/v1", "404": url}[dead]
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-key")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    batch = paid_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), api_base)
    assert main(["run", str(batch), "--quiet"]) == 2
    err = one_line(capsys)
    assert problem in err and "every call to it would fail" in err and "openai/gpt-4o-mini, config single-causal" in err
    assert server.hits == (["GET"] if dead == "404" else [])  # the probe only: no paid request
    assert not (tmp_path / "results").exists()


def test_an_endpoint_that_answers_passes_the_probe_with_one_unbilled_request(make_pack, endpoint, tmp_path, capsys,
                                                                              monkeypatch):
    url, server = endpoint
    server.status = 401  # there, refusing a request without a key: an endpoint all the same
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-key")
    batch = paid_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), url)
    assert main(["run", str(batch), "--address", "127.0.0.1:1"]) == 2  # stopped at the cluster, before the probe
    assert "nothing answers at 127.0.0.1:1" in one_line(capsys) and server.hits == []
    from madbench.runner.preflight import endpoint_problems
    assert endpoint_problems({url: {"m"}}) == [] and server.hits == ["GET"]


def test_a_404_at_models_refuses_only_an_endpoint_on_openais_route(endpoint):
    """Anthropic's, Azure's and Gemini's calls do not go to ``{api_base}/models``' API: its 404 says nothing there."""
    from madbench.runner.preflight import endpoint_problems
    url, server = endpoint
    assert endpoint_problems({url: {"anthropic/claude-x"}}) == []
    assert "answers 404 Not Found" in endpoint_problems({url: {"openai/gpt-x"}})[0]
    assert server.hits == ["GET", "GET"]


def test_a_dead_endpoint_is_one_line_for_the_probing_commands_too(make_pack, tmp_path, capsys):
    pack, scenarios = make_pack(tickers=tuple(TICKERS)), scenarios_file(tmp_path)
    api_base = f"http://127.0.0.1:{closed_port()}/v1"
    for argv in (["leakage", "audit", "--scenarios", str(scenarios), "--out", str(tmp_path / "out")],
                 ["probe", "recall", "--scenarios", str(scenarios), "--out", str(tmp_path / "out")]):
        assert main([*argv, "--pack", str(pack), "--model", "openai/madbench-sim", "--api-base", api_base,
                     "--send-context", "--no-cache"]) == 2
        assert "--api-base: " in (err := one_line(capsys)) and "the connection is refused" in err
    assert not (tmp_path / "out").exists()
    assert main(["llm", "ask", "--model", "openai/madbench-sim", "--api-base", api_base, "--prompt", "hi", "--no-cache"]) == 2
    assert "--api-base: " in (err := one_line(capsys)) and "the connection is refused" in err


# -- 2. output paths, before anything is computed


@pytest.mark.parametrize("case", ["a file", "empty", "through a file"])
def test_an_output_path_that_cannot_be_a_folder_is_refused_before_the_audit(case, make_pack, tmp_path, capsys):
    (tmp_path / "taken").write_text("mine")
    out = {"a file": str(tmp_path / "taken"), "empty": "", "through a file": str(tmp_path / "taken" / "out")}[case]
    for argv in (["leakage", "audit", "--scenarios", str(scenarios_file(tmp_path)), "--pack", str(make_pack())],
                 ["probe", "recall", "--model", "openai/madbench-sim", "--api-base", "http://127.0.0.1:1/v1",
                  "--scenarios", str(scenarios_file(tmp_path))],
                 ["data", "fetch", "--tickers", "AAA", "--start", "2020-01-01", "--end", "2020-02-01"]):
        assert main([*argv, "--out", out]) == 2
        err = one_line(capsys)
        assert err.startswith("madbench: error: --out: ")
        assert {"a file": "exists and is not a folder", "empty": "is empty", "through a file": "runs through a file"}[case] in err
    assert (tmp_path / "taken").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pack1", "scenarios.yaml", "taken"]  # nothing written


def test_scenarios_make_refuses_an_output_file_it_cannot_write(make_pack, tmp_path, capsys):
    (tmp_path / "taken").write_text("mine")
    pack = make_pack()
    for out, problem in ((tmp_path / "taken" / "s.yaml", "runs through a file"), (tmp_path, "is a folder"), ("", "is empty")):
        assert main(["scenarios", "make", "--quarters", "2021Q1:2021Q2", "--pack", str(pack), "--out", str(out)]) == 2
        assert problem in one_line(capsys)
    assert (tmp_path / "taken").read_text() == "mine"


def test_an_output_folder_in_a_read_only_folder_is_refused_before_the_audit(make_pack, tmp_path):
    pack, scenarios = make_pack(tickers=tuple(TICKERS)), scenarios_file(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        proc = subprocess.run([*_as_unprivileged(), sys.executable, "-m", "madbench.runner.cli", "leakage", "audit",
                               "--scenarios", str(scenarios), "--pack", str(pack), "--out", str(locked / "out")],
                              cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                              timeout=300)
    finally:
        locked.chmod(0o755)
    assert proc.returncode == 2, proc.stderr
    err = errors_only(proc.stderr)
    assert err.count("\n") == 1 and f"--out: {locked} is not writable by this user" in err, proc.stderr
    assert proc.stdout == "" and list(locked.iterdir()) == []


# -- 2. the benchmarks' options, bounded


@pytest.mark.parametrize("argv,problem", [
    (["--experiments", "1000000000000"], "argument --experiments: 1000000000000 is out of range: it must be <= 1e+08"),
    (["--max-scenarios", "100000000"], "argument --max-scenarios: 100000000 is out of range: it must be <= 1e+06"),
    (["--seed", "-1"], "argument --seed: -1 is out of range: it must be >= 0"),
    (["--looks", "20", "--max-scenarios", "4"], "--looks: 20 looks do not fit in 4 scenarios"),
    (["--experiments", "100000000", "--max-scenarios", "1000000"], "--experiments: 100,000,000 experiments of 1,000,000 "
                                                                   "scenarios need about 2,980,232.2 GiB at once"),
])
def test_bench_sequential_refuses_sizes_it_could_not_draw_in_one_line(argv, problem, capsys):
    assert exit_code(["bench", "sequential", *argv]) == 2
    assert problem in one_line(capsys)


def test_bench_sequential_refuses_a_size_past_the_memory_it_has(monkeypatch, capsys):
    from madbench.bench import sequential_designs
    monkeypatch.setattr(sequential_designs, "available_memory", lambda: 2**20)  # 1 MiB free
    assert exit_code(["bench", "sequential", "--experiments", "4000", "--max-scenarios", "70"]) == 2
    assert "4,000 experiments of 70 scenarios need about 0.0 GiB at once, and 0.0 GiB is available" in one_line(capsys)


# -- 2. options that contradict or repeat each other


@pytest.mark.parametrize("first,second,named", [("agents.limits.rpm=5", "agents.limits.rpm=6", "agents.limits.rpm"),
                                                ("agents.limits={rpm: 5}", "agents.limits.rpm=6", "agents.limits")])
def test_the_same_setting_given_twice_is_refused_naming_it(first, second, named, make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1)
    assert main(["run", str(batch), "--dry-run", "--set", first, "--set", second]) == 2
    assert f"--set: {named} is set more than once (alone or within another setting) (fix: give each TIER.FIELD once)" \
        in one_line(capsys)
    assert not (tmp_path / "results").exists()


def test_continue_on_a_batch_without_a_sequential_design_is_refused(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1)
    assert main(["run", str(batch), "--continue", "--quiet"]) == 2
    assert "--continue: " in (err := one_line(capsys)) and "has no `sequential:` block" in err
    assert not (tmp_path / "results").exists()


def test_blind_options_without_blind_are_refused_by_memo(make_pack, tmp_path, capsys):
    pack, scenarios = make_pack(tickers=tuple(TICKERS)), scenarios_file(tmp_path)
    assert main(["memo", "s2021Q1", "--scenarios", str(scenarios), "--pack", str(pack), "--blind-macro", "exact"]) == 2
    assert "--blind-macro: sets how a blind memo is built, and without --blind the memo is not blind" in one_line(capsys)
    assert main(["memo", "s2021Q1", "--scenarios", str(scenarios), "--pack", str(pack), "--blind", "--blind-macro",
                 "exact"]) == 0


@pytest.mark.parametrize("ids,problem", [("", "--ids: '' holds an empty id"), ("s2021Q1,,s2021Q2", "holds an empty id"),
                                         ("s2021Q1,s2021Q1", "--ids: s2021Q1 given more than once")])
def test_empty_and_repeated_ids_are_refused_by_the_audit(ids, problem, make_pack, tmp_path, capsys):
    assert main(["leakage", "audit", "--scenarios", str(scenarios_file(tmp_path)), "--pack", str(make_pack()), "--ids", ids,
                 "--out", str(tmp_path / "out")]) == 2
    assert problem in one_line(capsys)
    assert not (tmp_path / "out").exists()


def test_a_batch_without_a_blind_config_has_nothing_to_audit(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1)
    assert main(["leakage", "audit", "--batch", str(batch), "--out", str(tmp_path / "out")]) == 2
    assert f"{batch}: no config of this batch is blind" in one_line(capsys)
    blind = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1,
                        configs=[str(ROOT / "configs/debate/causal-debate-3-blind.yaml")])
    assert main(["leakage", "audit", "--batch", str(blind), "--blind-macro", "exact", "--out", str(tmp_path / "out")]) == 2
    assert "--blind-macro: the batch's blind config sets the blind options" in one_line(capsys)
    assert not (tmp_path / "out").exists() and not (tmp_path / "results").exists()


# -- 2. a key where a variable's name belongs, and a model no call could reach


@pytest.mark.parametrize("command", ["leakage", "llm", "probe", "rescore"])
def test_a_key_given_as_the_key_variable_is_refused_without_printing_it(command, make_pack, tmp_path, capsys):
    scenarios = str(scenarios_file(tmp_path))
    argv = {"leakage": ["leakage", "audit", "--scenarios", scenarios, "--pack", str(make_pack()), "--model",
                        "openai/gpt-4o-mini", "--out", str(tmp_path / "out")],
            "llm": ["llm", "ask", "--model", "openai/gpt-4o-mini", "--prompt", "hi", "--no-cache"],
            "probe": ["probe", "recall", "--model", "openai/gpt-4o-mini", "--scenarios", scenarios,
                      "--out", str(tmp_path / "out")],
            "rescore": ["rescore", str(tmp_path), "--scorer", "openai/gpt-4o-mini"]}[command]
    assert main([*argv, "--api-key-env", KEY]) == 2
    captured = capsys.readouterr()
    err = errors_only(captured.err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("madbench: error: --api-key-env: api_key_env: must name an environment variable")
    assert KEY not in captured.err + captured.out and KEY[3:12] not in captured.err
    assert not (tmp_path / "out").exists()


def test_an_api_base_flag_that_is_no_url_is_refused_by_the_probing_commands(make_pack, tmp_path, capsys):
    scenarios = str(scenarios_file(tmp_path))
    for argv in (["leakage", "audit", "--scenarios", scenarios, "--pack", str(make_pack()), "--out", str(tmp_path / "out")],
                 ["probe", "recall", "--scenarios", scenarios, "--out", str(tmp_path / "out")],
                 ["llm", "ask", "--prompt", "hi", "--no-cache"]):
        assert main([*argv, "--model", "openai/madbench-sim", "--api-base", "not a url"]) == 2
        assert "--api-base: api_base: is not an http(s) URL with a host" in one_line(capsys)
    assert not (tmp_path / "out").exists()


def test_an_unknown_provider_is_one_clean_line_as_run_gives_it(make_pack, tmp_path, capsys):
    assert main(["leakage", "audit", "--scenarios", str(scenarios_file(tmp_path)), "--pack", str(make_pack()), "--model",
                 "nosuchprovider/x", "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    err = errors_only(captured.err)
    assert err.count("\n") == 1 and captured.out == "", captured
    assert "--model: nosuchprovider/x: unknown model provider 'nosuchprovider': litellm cannot route it" in err
    assert not (tmp_path / "out").exists()


def test_probe_flags_without_a_model_are_refused_by_the_audit(make_pack, tmp_path, capsys):
    assert main(["leakage", "audit", "--scenarios", str(scenarios_file(tmp_path)), "--pack", str(make_pack()),
                 "--api-base", "http://127.0.0.1:8000/v1", "--out", str(tmp_path / "out")]) == 2
    assert "--api-base: is for the identification probe, which only --model asks for" in one_line(capsys)


# -- 5. what a second pass of bad inputs found


def test_a_write_never_replaces_a_symbolic_link_a_pipe_or_a_folder(tmp_path):
    from madbench.data.atomic import atomic_write_text
    from madbench.data.errors import InputError
    target = tmp_path / "elsewhere.txt"
    target.write_text("kept")
    (link := tmp_path / "link.txt").symlink_to(target)
    os.mkfifo(pipe := tmp_path / "pipe")  # a device's stand-in that the test may touch: replacing /dev/null is not
    (folder := tmp_path / "folder").mkdir()
    for path, said in ((link, "is a symbolic link"), (pipe, "a device, pipe or socket"), (folder, "is a folder")):
        with pytest.raises(InputError, match=said):
            atomic_write_text(path, "written")
    assert link.is_symlink() and target.read_text() == "kept" and pipe.is_fifo() and folder.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.txt", "folder", "link.txt", "pipe"]  # no temp left


def test_scenarios_make_refuses_an_out_that_is_a_pipe_not_a_file(make_pack, tmp_path, capsys):
    os.mkfifo(pipe := tmp_path / "out.yaml")
    assert main(["scenarios", "make", "--pack", str(make_pack(tickers=tuple(TICKERS))), "--quarters", "2021Q1:2021Q2",
                 "--count", "2", "--out", str(pipe)]) == 2
    assert "a device, pipe or socket" in one_line(capsys) and pipe.is_fifo()


@pytest.mark.parametrize("argv,said", [
    (["power", "--effect", "0.1", "--sd", "0.3", "--power", ""], "--power: '' is not a comma-separated list"),
    (["power", "--effect", "0.1", "--sd", "0.3", "--power", "0.8,,0.9"], "is not a comma-separated list"),
    (["power", "--effect", "1e-300", "--sd", "1e300"], "--effect: d_z = effect / sd"),
    (["backtest", "--weights", "equal", "--quarter", "0000Q1", "--tickers", "AAA,BBB"], "'0000Q1' is out of range"),
    (["backtest", "--weights", "equal", "--quarter", "２０２３Q2", "--tickers", "AAA,BBB"], "is not a quarter"),
    (["llm", "ask", "--model", "openai/gpt-4o-mini", "--prompt", " "], "--prompt: is empty"),
    (["llm", "ask", "--model", "gpt4", "--prompt", "hi"], "'gpt4' is not a model string"),
    (["llm", "ask", "--model", "frob/x", "--prompt", "hi"], "unknown model provider 'frob'"),
    (["llm", "ask", "--model", "openai/gpt-4o-mini", "--prompt", "hi", "--api-key-env", "MADBENCH_UNSET_KEY_VAR"],
     "MADBENCH_UNSET_KEY_VAR (its api_key_env) is not set"),
    (["bench", "gateway", "--n", "100000"], "--n: 100000 calls: `bench gateway` sends at most 2000"),
    (["stats", "--compare", "", "RESULTS"], "--compare: '' holds an empty name"),
    (["stats", "--metric", "sharpe,sharpe", "RESULTS"], "--metric: 'sharpe,sharpe' names one twice"),
    (["rescore", "RESULTS", "--scorer", "rules", "--label", " ", "--dry-run"], "--label: is empty"),
    (["sim", "serve", "--port", "0", "--record-recognised", "FOLDER"], "--record-recognised: FOLDER"),
])
def test_a_value_no_command_could_use_is_one_line_before_any_work(argv, said, make_pack, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MADBENCH_PACK", str(make_pack(tickers=tuple(TICKERS))))
    monkeypatch.delenv("MADBENCH_UNSET_KEY_VAR", raising=False)
    results = shutil.copytree(ROOT / "tests" / "results" / "data" / "rules-2-unversioned", tmp_path / "b")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    places = {"RESULTS": str(results), "FOLDER": str(tmp_path)}
    assert exit_code([places.get(a, a) for a in argv]) == 2
    assert said.replace("FOLDER", str(tmp_path)) in one_line(capsys)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written


@pytest.mark.parametrize("field", ["model", "results_dir", "cache_dir"])
def test_an_empty_batch_field_is_refused_not_taken_as_unset(field, make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), **{field: ""})
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert f"{field}: is empty" in one_line(capsys)


def test_an_estimates_options_on_a_real_run_are_refused(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), model="rules/auto")
    for flag in (["--json"], ["--calibrate-from", str(tmp_path)]):
        assert main(["run", str(batch), *flag]) == 2
        assert f"{flag[0]}: is an option of the estimate" in one_line(capsys)
    assert not (tmp_path / "results").exists()


def test_rescore_refuses_a_scorer_no_call_could_reach(tmp_path, capsys, monkeypatch):
    results = shutil.copytree(ROOT / "tests" / "results" / "data" / "rules-2-unversioned", tmp_path / "b")
    before = sorted(p.name for p in results.iterdir())
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["rescore", str(results), "--scorer", "frob/x", "--dry-run"]) == 2
    assert "unknown model provider 'frob'" in one_line(capsys)
    assert main(["rescore", str(results), "--scorer", "openai/gpt-4o-mini"]) == 2  # a dry run only warns of the key
    assert "no API key: export OPENAI_API_KEY" in one_line(capsys)
    assert sorted(p.name for p in results.iterdir()) == before


def test_export_refuses_a_damaged_commit_point_and_leaves_no_folder(tmp_path, capsys):
    results = shutil.copytree(ROOT / "tests" / "results" / "data" / "rules-2-unversioned", tmp_path / "b")
    commit = sorted((results / "runs").glob("*.json"))[0]
    commit.write_text(commit.read_text()[:40])  # torn
    assert main(["export", str(results), "--format", "jsonl", "--out", str(tmp_path / "out")]) == 2
    assert str(commit) in one_line(capsys)
    assert not (tmp_path / "out").exists()


def test_probe_recall_reads_every_input_before_it_sends_its_one_probe(make_pack, endpoint, tmp_path, capsys):
    url, server = endpoint
    server.status = 401
    assert main(["probe", "recall", "--scenarios", str(scenarios_file(tmp_path)), "--pack", str(make_pack(tickers=tuple(TICKERS))),
                 "--model", "openai/madbench-sim", "--api-base", url, "--send-context", "--no-cache",
                 "--prompt", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "out")]) == 2
    assert "missing.yaml" in one_line(capsys) and server.hits == []
