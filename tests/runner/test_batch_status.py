"""Which failed runs a retry would repeat: a run that failed on its (cached) answers would, one that failed after its
backtest (a run metric of the researcher's own code raised) would not, once the code is fixed."""

from __future__ import annotations

import hashlib
import json

from madbench.debate.trace import GENESIS
from madbench.runner.batch_status import repeats_on_retry
from madbench.runner.store import BatchLayout


def _trace(layout: BatchLayout, run_id: str, kinds: list[str]) -> None:
    path = layout.trace_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    prev, lines = GENESIS, []
    for seq, kind in enumerate(kinds):
        raw = (json.dumps({"event": kind, "seq": seq, "prev": prev}) + "\n").encode()
        lines.append(raw)
        prev = hashlib.sha256(raw).hexdigest()
    path.write_bytes(b"".join(lines))


def test_a_run_failed_on_its_answers_repeats_on_retry_one_failed_after_its_backtest_does_not(tmp_path):
    layout = BatchLayout(tmp_path)
    _trace(layout, "answers", ["run_start", "llm_call", "llm_call", "run_end"])
    _trace(layout, "metric", ["run_start", "llm_call", "final", "backtest", "run_end"])
    _trace(layout, "call", ["run_start", "llm_call", "llm_failure", "run_end"])
    assert repeats_on_retry(layout, "answers")
    assert not repeats_on_retry(layout, "metric")
    assert not repeats_on_retry(layout, "call")
