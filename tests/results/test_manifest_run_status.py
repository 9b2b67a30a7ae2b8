"""A manifest whose run has a status madbench never writes is refused in one line by `madbench status`."""

import json

from madbench.results.records import ManifestRun, write_manifest
from madbench.runner.cli import main


def test_status_refuses_a_manifest_run_status_outside_pending_ok_failed_not_needed(tmp_path, capsys):
    runs = [ManifestRun(run_id="r1", scenario_id="s", config="c", replicate=0, status="ok")]
    path = write_manifest(tmp_path, {"name": "b"}, runs, "finished")
    body = json.loads(path.read_text())
    body["runs"][0]["status"] = "weird"
    path.write_text(json.dumps(body))
    assert main(["status", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "manifest.json: not a valid manifest" in err and "runs[0].status" in err and len(err.strip().splitlines()) == 1
