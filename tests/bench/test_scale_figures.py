"""`bench scale`'s arithmetic: runs per second over each tenth of a batch, and the growth from two sizes to 100,000."""

import pytest

from madbench.bench.scale import extrapolate, tenths


def test_runs_per_second_by_tenth_follow_the_commit_times():
    steady = [i * 0.5 for i in range(100)]  # a commit every half second
    assert tenths(steady) == [2.0] * 10
    slowing = steady[:50] + [24.5 + i for i in range(1, 51)]  # the second half one a second
    rates = tenths(slowing)
    assert rates[:5] == [2.0] * 5 and rates[5:] == [1.0] * 5


def _measure(n: int, wall: float, memory: float) -> dict:
    return {"runs": n, "wall_s": wall, "first_commit_s": 5.0, "compaction_s": n / 1000, "second_invocation_s": 2.0,
            "open_results_runs_s": 0.1 * n / 1000, "driver_peak_mb": memory, "driver_cpu_ms_per_run": 4.0,
            "tables_bytes_per_run": 300, "traces_bytes_per_run": 4000, "commit_points_bytes_per_run": 1200,
            "row_logs_peak_bytes_per_run": 2000, "runs_per_s_by_tenth": [10.0] * 10, "runs_per_s": 10.0, "cpus": 2,
            "memory": {"actor_peak_mb": 300}}


def test_figures_grow_by_the_power_law_through_the_two_sizes():
    out = extrapolate(_measure(1000, 100.0, 400.0), _measure(20_000, 2000.0, 400.0))
    fig = out["figures"]
    assert fig["wall_s"]["value"] == pytest.approx(10_000.0) and fig["wall_s"]["growth_exponent"] == pytest.approx(1.0)
    assert fig["first_commit_s"]["growth_exponent"] == 0 and fig["driver_peak_mb"]["value"] == pytest.approx(400.0)
    # 5 runs/s per core here: 40 on a laptop's 8 cores, 800 on 160, over the driver's 250 (4 ms of its CPU a run)
    assert out["laptop"]["runs_per_s"] == pytest.approx(40.0) and out["laptop"]["bound_by"] == "the actors' cores"
    assert out["cluster"]["runs_per_s"] == pytest.approx(250.0) and "driver" in out["cluster"]["runs_out_first"]
    assert out["laptop"]["disk_gb_needed"] == pytest.approx(100_000 * 7500 / 1e9, abs=0.1)


def test_local_cluster_starts_ray_with_this_interpreter():
    """A venv made with --system-site-packages has Ray but no `ray` script beside its python: `bench scale` failed
    there with a FileNotFoundError. The command runs Ray's CLI module under sys.executable instead."""
    import subprocess
    import sys

    from madbench.bench.local_cluster import RAY_CLI

    assert RAY_CLI[0] == sys.executable
    out = subprocess.run([*RAY_CLI, "start", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--head" in out.stdout
