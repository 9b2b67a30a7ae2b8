"""The dry run says what it is doing while it checks the batch and builds the memos its estimate counts (minutes on a
large batch)."""

from madbench.runner.cli import main
from tests.runner.test_batch import TICKERS, write_batch


def test_the_dry_run_says_it_builds_memos_and_quiet_silences_it(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)))
    assert main(["run", str(batch), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "checking the batch before anything runs (4 scenarios backtestable, 2 configs' prompts rendered)" in err
    assert "building the memos the estimate counts: 0 of 4" in err and "4 memos built in" in err
    assert main(["run", str(batch), "--dry-run", "--quiet"]) == 0
    quiet = capsys.readouterr().err
    assert "memos" not in quiet and "checking the batch" not in quiet
