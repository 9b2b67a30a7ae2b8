"""Every input is checked before the first paid call: one line on stderr naming the field, exit 2, no request sent
and nothing written; prices are known or the run is refused."""

from __future__ import annotations

import http.server
import os
import threading
from pathlib import Path

import pytest
import yaml

from madbench.data.errors import InputError
from madbench.eval.stats.frame import batch_pairs
from madbench.results import ManifestRun, write_manifest
from madbench.runner.cli import main
from madbench.sim.http_stub import QuietServer
from tests.conftest import errors_only
from tests.runner.test_batch import ROOT, TICKERS, write_batch

KEY_ENV = "MADBENCH_INPUT_CHECKS_KEY"


class _Counting(http.server.BaseHTTPRequestHandler):
    """Answers nothing useful: it only counts the requests that reach it."""

    hits = 0

    def _any(self):
        type(self).hits += 1
        self.send_response(500)
        self.end_headers()

    do_GET = do_POST = _any

    def log_message(self, *args):
        pass


@pytest.fixture
def provider():
    """A local HTTP endpoint that counts every request it gets: the paid provider of these batches."""
    _Counting.hits = 0
    server = QuietServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", _Counting
    server.shutdown()


def one_line(capsys) -> str:
    err = errors_only(capsys.readouterr().err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def paid_batch(tmp_path: Path, pack: Path, api_base: str, **over) -> Path:
    """One scenario, one config, one run on a priced model reached at ``api_base`` (its key set)."""
    model = {"model": "openai/gpt-4o-mini", "api_base": api_base, "api_key_env": KEY_ENV}
    fields = {"model": model, "replicates": 1, "workers": 1,
              "configs": [str(ROOT / "configs/debate/single-causal.yaml")]} | over
    return write_batch(tmp_path, pack, **fields)


def edited_config(tmp_path: Path, **fields) -> Path:
    data = yaml.safe_load((ROOT / "configs/debate/single-causal.yaml").read_text()) | fields
    data.pop("routing", None)
    path = tmp_path / "edited-config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def zero_rubric(tmp_path: Path) -> Path:
    rubric = yaml.safe_load((ROOT / "configs/rubrics/uniform.yaml").read_text())
    for pillar in rubric["pillars"].values():
        pillar["weight"] = 0
    path = tmp_path / "zero-rubric.yaml"
    path.write_text(yaml.safe_dump(rubric))
    return path


def _negative_answer_budget(tmp_path):
    return {"configs": [str(edited_config(tmp_path, max_tokens={"propose": -100}))]}, [], "max_tokens.propose"


def _all_zero_rubric(tmp_path):
    return {"configs": [str(edited_config(tmp_path, crit_rubric=str(zero_rubric(tmp_path))))]}, [], "every weight is 0"


def _pair_naming_a_missing_config(tmp_path):
    return {"pairs": [{"control": "single-causal", "treatment": "no-such-config", "factor": ["x"]}]}, [], \
        "pairs[0]: no config named no-such-config"


def _workers_past_the_bound(tmp_path):
    return {"workers": 100_000}, [], "workers: Input should be less than or equal to"


def _retries_past_the_bound(tmp_path):
    return {"retries": 1000}, [], "retries: Input should be less than or equal to"


def _nan_cost_cap(tmp_path):
    return {"max_cost_usd": float("nan")}, [], "max_cost_usd"


def _empty_model_flag(tmp_path):
    return {}, ["--model", ""], "--model: is empty"


def _unknown_rule_model(tmp_path):
    return {}, ["--model", "rules/macr"], "rules/macr: unknown rule-based model"


def _overlong_name(tmp_path):
    return {"name": "a" * 300_000}, [], "name: String should have at most 100 characters"


def _overlong_model_name(tmp_path):
    return {}, ["--model", "openai/" + "x" * 300], "--model: the results directory's name"


def _malformed_address(tmp_path):
    return {}, ["--address", "not-an-address:xx"], "--address: 'not-an-address:xx' is not a Ray address"


def _unreachable_address(tmp_path):
    return {}, ["--address", "127.0.0.1:1"], "--address: nothing answers at 127.0.0.1:1"


CASES = [_negative_answer_budget, _all_zero_rubric, _pair_naming_a_missing_config, _workers_past_the_bound,
         _retries_past_the_bound, _nan_cost_cap, _empty_model_flag, _unknown_rule_model, _overlong_name,
         _overlong_model_name, _malformed_address, _unreachable_address]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__.strip("_") for c in CASES])
def test_bad_input_is_one_line_and_exit_2_before_any_request(case, make_pack, provider, tmp_path, capsys, monkeypatch):
    api_base, counter = provider
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-key")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    over, argv, field = case(tmp_path)
    batch = paid_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), api_base, **over)
    assert main(["run", str(batch), *argv]) == 2
    assert field in one_line(capsys)
    assert counter.hits == 0                       # no request reached the provider
    assert not (tmp_path / "results").exists()     # nothing was written


def test_a_clean_paid_batch_passes_every_check_up_to_the_cluster(make_pack, provider, tmp_path, capsys, monkeypatch):
    """The cases above fail for their own reason: the same batch, unedited, gets as far as joining the cluster."""
    api_base, counter = provider
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-key")
    batch = paid_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), api_base)
    assert main(["run", str(batch), "--address", "127.0.0.1:1"]) == 2
    assert "nothing answers at 127.0.0.1:1" in one_line(capsys)
    assert counter.hits == 0


def test_a_key_given_twice_in_a_yaml_mapping_is_refused_with_both_lines(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1)
    batch.write_text(batch.read_text() + "workers: 3\n")  # write_batch already wrote `workers: 1`
    assert main(["run", str(batch), "--dry-run"]) == 2
    err = one_line(capsys)
    assert f"{batch}: line" in err and "duplicate key 'workers' (first on line" in err


@pytest.mark.parametrize("argv,field", [
    (["backtest", "--capital", "-100", "x"], "argument --capital: -100 is out of range: it must be > 0"),
    (["sim", "serve", "--latency-median", "nan"], "argument --latency-median: 'nan' is not a finite number"),
    (["run", "x.yaml", "--max-runs", "many"], "argument --max-runs: 'many' is not an integer"),
    (["stats", "--help-me"], "unrecognized arguments: --help-me"),
])
def test_bad_command_line_values_are_one_line_and_exit_2(argv, field, capsys):
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own usage errors (an unknown option) exit from the parser
        code = stop.code
    assert code == 2
    err = one_line(capsys)
    assert field in err and "error: madbench" not in err  # the CLI named once, as the speaker


# -- prices: known, declared, or the run refused


def test_a_dry_run_of_a_model_without_a_price_says_unknown_and_needs_no_key(make_pack, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1)
    assert main(["run", str(batch), "--dry-run", "--model", "anthropic/claude-haiku-4-6"]) == 0
    captured = capsys.readouterr()
    batch_line = next(line for line in captured.out.splitlines() if line.startswith("batch: "))
    assert "unknown (worst unknown)" in batch_line and "$0.00" not in batch_line
    assert "warning: anthropic/claude-haiku-4-6: no API key" in captured.err     # a warning, not a refusal
    assert "nearest known: anthropic/claude-haiku-4-5" in captured.err


def test_a_cost_cap_on_a_model_without_a_price_is_refused_naming_it(make_pack, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1, max_cost_usd=5)
    assert main(["run", str(batch), "--dry-run", "--model", "anthropic/claude-haiku-4-6"]) == 2
    err = one_line(capsys)
    assert "anthropic/claude-haiku-4-6: unknown price" in err and "price: {input_usd_per_mtok" in err
    assert "nearest known: anthropic/claude-haiku-4-5" in err  # under a cap, a typo is named as one too


def test_a_declared_price_lets_a_capped_batch_through_and_is_what_it_costs(make_pack, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-key")
    priced = {"model": "anthropic/claude-haiku-4-6", "price": {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 5.0}}
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1, max_cost_usd=5, model=priced)
    assert main(["run", str(batch), "--dry-run", "--json"]) == 0
    estimate = yaml.safe_load(capsys.readouterr().out)
    assert estimate["models_without_price"] == []
    tokens_in, tokens_out = estimate["total"]["prompt_tokens"], estimate["total"]["completion_tokens"]
    # the estimate's figures are rounded for display: equal to a part in a thousand
    assert estimate["estimated_cost_usd"] == pytest.approx((tokens_in * 1.0 + tokens_out * 5.0) / 1e6, rel=1e-3)


def test_a_mistyped_model_is_named_with_the_nearest_known_ones(make_pack, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1)
    assert main(["run", str(batch), "--dry-run", "--model", "openai/gpt-5-mnii"]) == 0
    assert "openai/gpt-5-mnii: unknown model" in capsys.readouterr().err
    assert main(["run", str(batch), "--model", "openai/gpt-5-mnii"]) == 2  # a run refuses it
    err = one_line(capsys)
    assert "nearest known: openai/gpt-5-mini" in err
    assert not (tmp_path / "results").exists()


# -- results directories


def test_a_symlinked_folder_inside_a_results_directory_is_refused(tmp_path, capsys):
    root = tmp_path / "results" / "t"
    root.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "traces").symlink_to(elsewhere, target_is_directory=True)
    for argv in (["status", str(root)], ["stats", str(root)], ["report", str(root)]):
        assert main(argv) == 2
        err = one_line(capsys)
        assert f"{root / 'traces'}: is a symbolic link to a folder" in err


def test_a_symlinked_folder_inside_a_batchs_results_directory_stops_the_run(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1)
    root = tmp_path / "results" / "t"
    (root / "parts").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    (root / "parts" / "runs").symlink_to(tmp_path / "other", target_is_directory=True)
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert "is a symbolic link to a folder" in one_line(capsys)
    assert not any((tmp_path / "other").iterdir())


def test_a_file_where_a_folder_is_expected_and_the_reverse_are_one_line(make_pack, tmp_path, capsys):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for argv in (["status", str(a_file)], ["stats", str(a_file)], ["report", str(a_file)],
                 ["rescore", str(a_file), "--scorer", "rules/crit"], ["cache", "stats", "--cache-dir", str(a_file)],
                 ["trace", "show", str(empty)]):
        assert main(argv) == 2, argv
        one_line(capsys)
    assert main(["run", str(tmp_path), "--dry-run"]) == 2  # a folder given for the batch file
    one_line(capsys)
    assert main(["debate", "s1", "--scenarios", str(a_file), "--config", str(a_file), "--out", str(a_file)]) == 2
    assert f"--out: {a_file} is a file, not a directory" in one_line(capsys)
    root = tmp_path / "results" / "t"
    root.mkdir(parents=True)
    (root / "runs").write_text("not a folder")
    assert main(["status", str(root)]) == 2
    assert "is a file where the results layout has a folder" in one_line(capsys)
    (root / "runs").unlink()
    (root / "manifest.json").mkdir()
    assert main(["status", str(root)]) == 2
    assert "is a folder where the results layout has a file" in one_line(capsys)


@pytest.mark.parametrize("damaged", ["manifest.json", "runs.parquet"])
def test_a_corrupt_results_directory_is_one_line_in_every_reading_command(damaged, tmp_path, capsys):
    root = tmp_path / "results" / "t"
    root.mkdir(parents=True)
    (root / damaged).write_text("{not json, not parquet")
    for argv in (["status", str(root)], ["stats", str(root)], ["report", str(root)],
                 ["rescore", str(root), "--scorer", "rules/crit"]):
        assert main(argv) == 2, argv
        assert str(root) in one_line(capsys)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes a read-only directory anyway")
def test_a_read_only_results_directory_is_one_line(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1)
    root = tmp_path / "results" / "t"
    root.mkdir(parents=True)
    root.chmod(0o500)
    try:
        assert main(["run", str(batch), "--dry-run"]) == 2
        assert "read-only" in one_line(capsys)
    finally:
        root.chmod(0o700)


def test_stats_refuses_a_declared_pair_naming_a_config_the_batch_did_not_run(tmp_path):
    root = tmp_path / "results" / "t"
    root.mkdir(parents=True)
    runs = [ManifestRun(run_id=f"r{i}", scenario_id="s", config=c, replicate=0, status="ok")
            for i, c in enumerate(["a", "b"])]
    write_manifest(root, {"pairs": [{"control": "a", "treatment": "b", "factor": ["x"]}]}, runs, "done")
    assert batch_pairs(root) == [("b", "a")]
    write_manifest(root, {"pairs": [{"control": "a", "treatment": "zz", "factor": ["x"]}]}, runs, "done")
    with pytest.raises(InputError, match=r"spec.pairs\[0\].treatment: 'zz' is not a config of this batch"):
        batch_pairs(root)
