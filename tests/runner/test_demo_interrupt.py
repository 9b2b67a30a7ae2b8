"""Ctrl-C during one of the demo's batches stops the demo: no further batch starts (runner/demo.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from madbench.runner import demo


@pytest.mark.parametrize("interrupted_batch", ["rules-35", "quickstart@sim"])
def test_demo_starts_no_further_batch_after_one_is_interrupted(interrupted_batch, tmp_path, monkeypatch, capsys):
    started: list[str] = []

    def fake_run(batch_file, **kwargs):
        label = batch_file.stem + (f"@{kwargs['routing']}" if "routing" in kwargs else "")
        started.append(label)
        return SimpleNamespace(state="interrupted" if label == interrupted_batch else "finished", pending=0, failed=0,
                               results_dir=tmp_path / label)

    class FakeSim:
        url, farewell = "http://127.0.0.1:1/v1", ""

        def __enter__(self):
            started.append("simulated provider")
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setenv("MADBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(demo.api, "run", fake_run)
    monkeypatch.setattr(demo, "simulated_provider", FakeSim)
    monkeypatch.setattr(demo, "local_extra_installed", lambda: True)
    code = demo.run_demo(tmp_path, no_local=False, pack=None, evidence=None, cache_dir=None,
                         show=lambda run: 130 if run.state == "interrupted" else 0)
    assert code == 130
    assert started[-1] == interrupted_batch
    assert not (tmp_path / "summary.md").exists()
    assert "run `madbench demo` again to resume" in capsys.readouterr().out
