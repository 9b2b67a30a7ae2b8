"""Shared fixtures: small packs the tests make themselves, and the shared data when present."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from madbench.data.market.write import write_pack

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SHARED_MARKET = SHARED / "market"
SHARED_PAPER = SHARED / "paper"

requires_shared = pytest.mark.skipif(
    not (SHARED_MARKET / "prices.parquet").exists(),
    reason="real-data test: ../shared/data/market is absent on this machine (it ships beside the checkout in CI)",
)


def synthetic_tables(n_days: int = 700, tickers=("AAA", "BBB", "CCC"), start="2020-01-01", seed: int = 1) -> dict[str, pd.DataFrame]:
    """Random-walk prices for ``tickers`` plus SPY on business days, and a few macro series."""
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range(start, periods=n_days)
    rows = []
    market = rng.normal(0.0004, 0.01, n_days)
    for j, t in enumerate(("SPY",) + tuple(tickers)):
        beta = 1.0 if t == "SPY" else 0.5 + 0.4 * j
        r = beta * market + (0 if t == "SPY" else rng.normal(0, 0.012, n_days))
        px = 100.0 * (1 + j) * np.cumprod(1 + r)
        vol = rng.integers(1_000_000, 5_000_000, n_days).astype(float)
        rows.append(pd.DataFrame({"date": dates.date, "ticker": t, "adj_close": px, "close": px * 1.01, "volume": vol}))
    prices = pd.concat(rows, ignore_index=True)
    macro_rows = []
    days = pd.date_range(dates[0] - pd.Timedelta(days=400), dates[-1], freq="D")
    for s, base in (("DFF", 1.0), ("DTB3", 1.2), ("DGS2", 1.5), ("DGS10", 2.0), ("DGS30", 2.4), ("T10Y2Y", 0.5),
                    ("T10YIE", 2.1), ("BAMLH0A0HYM2", 4.0), ("DTWEXBGS", 110.0), ("DCOILWTICO", 70.0), ("VIXCLS", 18.0)):
        v = base + np.cumsum(rng.normal(0, 0.01, len(days)))
        macro_rows.append(pd.DataFrame({"date": days.date, "series": s, "value": v}))
    months = pd.date_range(dates[0] - pd.Timedelta(days=400), dates[-1], freq="MS")
    for s, base in (("CPIAUCSL_YOY", 2.0), ("CPILFESL_YOY", 2.2), ("INDPRO", 100.0), ("UNRATE", 4.0)):
        macro_rows.append(pd.DataFrame({"date": months.date, "series": s, "value": base + np.arange(len(months)) * 0.1}))
    macro = pd.concat(macro_rows, ignore_index=True)
    universe = pd.DataFrame({
        "ticker": ["SPY", *tickers],
        "name": ["S&P 500 ETF", *[f"{t} Inc" for t in tickers]],
        "sector": ["ETF", *["Tech", "Energy", "Financials", "Health", "Utilities"][: len(tickers)]],
        "asset_class": ["etf", *["stock"] * len(tickers)],
    })
    return {"prices": prices, "macro": macro, "universe": universe}


@pytest.fixture
def make_pack(tmp_path):
    """Write a synthetic pack (optionally edited) and return its directory."""
    counter = {"n": 0}

    def _make(edit=None, **kw) -> Path:
        tables = synthetic_tables(**kw)
        if edit:
            edit(tables)
        counter["n"] += 1
        return write_pack(tmp_path / f"pack{counter['n']}", tables)

    return _make


@pytest.fixture(scope="session")
def ray_local():
    """A real local Ray cluster (4 logical CPUs so that 4 workers run side by side on 2 cores)."""
    import os

    import ray
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from madbench.runner.execute import LOCAL_RAY_CONFIG, WORKER_NICENESS
    from madbench.runner.ray_home import local_ray_temp_dir
    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 _temp_dir=str(local_ray_temp_dir()),
                 _system_config=LOCAL_RAY_CONFIG,  # no idle workers prestarted: the tests' work runs on actors
                 runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[1]),
                                              WORKER_NICENESS: "0"}})  # as madbench's own Ray gives its actors
    yield ray
    ray.shutdown()


def errors_only(stderr: str) -> str:
    """``stderr`` without madbench's warning and progress lines: `madbench run` from a checkout with uncommitted changes
    warns about it on every run, and says what a long phase is doing ("madbench: checking the batch ... ..."), beside
    the one line an error gets."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith("madbench: warning:") and not (line.startswith("madbench: ")
                                                                        and line.rstrip().endswith(" ...")))


def readme_example() -> str:
    """The first Python block of the README's "Python API" section."""
    import re
    section = (ROOT / "README.md").read_text().split("## Python API", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="session")
def readme_rules35(tmp_path_factory):
    """The README's Python API example, run verbatim once per session from a working directory that holds the
    checkout's configs/: the `rules-35` batch (105 runs), which several tests read. Returns the working directory
    and the example's namespace; the finished batch is ``<dir>/results/rules-35`` (copy it before writing to it).
    The example's Ray is stopped at once, so that its cache setting reaches no later test's workers."""
    import ray
    here = tmp_path_factory.mktemp("notebook")
    (here / "configs").symlink_to(ROOT / "configs")
    saved_cwd, saved_cache = Path.cwd(), os.environ.get("MADBENCH_CACHE_DIR")
    was_running = ray.is_initialized()
    if was_running:
        ray.shutdown()
    os.chdir(here)
    os.environ["MADBENCH_CACHE_DIR"] = str(here / "cache")
    try:
        namespace: dict = {}
        exec(compile(readme_example(), "README.md", "exec"), namespace)
    finally:
        os.chdir(saved_cwd)
        if saved_cache is None:
            os.environ.pop("MADBENCH_CACHE_DIR")
        else:
            os.environ["MADBENCH_CACHE_DIR"] = saved_cache
        if ray.is_initialized():
            ray.shutdown()
    return here, namespace


@pytest.fixture
def finished_rules35(readme_rules35, tmp_path) -> Path:
    """A private copy of the finished `rules-35` batch, at ``tmp_path/rules-35``."""
    import shutil
    return Path(shutil.copytree(readme_rules35[0] / "results" / "rules-35", tmp_path / "rules-35", symlinks=True))


# --- The suite's own hygiene: it leaves the user's home as it found it ------------------------------------------
# Tests write only under their temporary directories. A test that forgets `--cache-dir` (or a default that
# points at the user's cache) would quietly fill ~/.cache/madbench; the session fails instead, naming the paths.

#: Watched whole: madbench's own cache. Watched at the top level only: $HOME and ~/.cache (a new or replaced entry
#: there is a write outside the tests' directories; their subtrees, such as pip's cache, are other tools' business).
HOME = Path.home()


def _tree_state(root: Path) -> dict[str, tuple[int, int]]:
    if not root.exists():
        return {}
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size if p.is_file() else 0)
            for p in [root, *root.rglob("*")] if not p.is_symlink()}


def _top_state(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.iterdir() if not p.is_symlink()} if root.is_dir() else {}


def home_state() -> dict[str, object]:
    return {"madbench": _tree_state(HOME / ".cache" / "madbench"), "home": _top_state(HOME),
            "cache": _top_state(HOME / ".cache")}


def home_changes(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """The paths that were added, removed or changed between two `home_state` snapshots."""
    changed = []
    for part in before:
        old, new = before[part], after[part]
        changed += sorted(p for p in set(old) | set(new) if old.get(p) != new.get(p))
    return changed


def pytest_configure(config):
    # The user's own settings must not send the tests' answers into the user's cache or pack.
    for name in ("MADBENCH_CACHE_DIR", "MADBENCH_CACHE_SHARED", "RAY_ADDRESS"):
        os.environ.pop(name, None)
    # The offline model is assembled where the tests' servers look for it, not in the user's ~/.cache/madbench/models
    # (inherited by the subprocesses and Ray workers the tests start).
    config._madbench_models = tempfile.mkdtemp(prefix="madbench-test-models-")
    os.environ["MADBENCH_MODEL_DIR"] = config._madbench_models
    # Everything else madbench keeps outside the working directory (a local Ray's sessions among it) goes to a home of
    # the session's own, short enough for Ray's socket paths.
    os.environ["MADBENCH_HOME"] = tempfile.mkdtemp(prefix="mbh-")
    sys.addaudithook(_watch_madbench_cache)
    _ray_messages_outside_captures()
    if not _is_xdist_worker(config):
        _compile_the_package()


#: The package's folders in the checkout (the editable install imports them from here).
PACKAGE_DIRS = ("madbench", "runner", "debate", "scoring", "eval")


def _compile_the_package() -> None:
    """Where Python is told not to write bytecode (PYTHONDONTWRITEBYTECODE, as in many containers), an editable
    install's modules are compiled again by every process that imports them: the suite's workers, the commands it
    starts and every Ray worker of theirs, about a thousand processes at half a second each. Compiled once here
    instead, into the checkout's ignored ``__pycache__`` folders, where any later process reads them."""
    if not sys.flags.dont_write_bytecode:
        return  # each process writes what it compiles, as usual
    import compileall
    for name in PACKAGE_DIRS:
        compileall.compile_dir(str(ROOT / name), quiet=1, workers=1)


def _ray_messages_outside_captures() -> None:
    """Ray's driver prints the cluster's messages (a raylet's "N worker processes have been started") from a
    background thread whenever they arrive: madbench sends them to stderr, which here is whichever test is capturing
    then, one whose command must print one line. In the suite they go to the process's own stderr instead, shown with
    a failing test's report. Ray's own printer stays reachable as ``__wrapped__``."""
    from ray._private import worker
    ray_printer = worker.print_to_stdstream

    def print_outside_captures(data: dict, ignore_prefix: bool) -> None:
        for line in data["lines"]:
            print(f"({data.get('pid')}) {line}", file=sys.__stderr__, flush=True)

    print_outside_captures.__wrapped__ = ray_printer  # type: ignore[attr-defined]
    print_outside_captures.to_stderr = True  # type: ignore[attr-defined]  # madbench's init_ray leaves it
    worker.print_to_stdstream = print_outside_captures


def pytest_unconfigure(config):
    models = getattr(config, "_madbench_models", None)
    if models is not None:
        shutil.rmtree(models, ignore_errors=True)


#: The test running now and, per test, the paths under madbench's own cache it opened or created (in this process;
#: the home snapshot below also sees subprocesses and Ray workers, without naming the test).
_CURRENT: dict[str, str] = {}
_TOUCHED: dict[str, set[str]] = {}
_WATCHED = str(HOME / ".cache" / "madbench")
_AUDITED = {"open", "os.mkdir", "sqlite3.connect", "os.rename", "os.replace", "os.remove", "shutil.rmtree"}


def _watch_madbench_cache(event: str, args: tuple) -> None:
    if event in _AUDITED and args and isinstance(args[0], (str, os.PathLike)) and "nodeid" in _CURRENT:
        path = os.fspath(args[0])
        if isinstance(path, str) and path.startswith(_WATCHED):
            _TOUCHED.setdefault(_CURRENT["nodeid"], set()).add(path)


@pytest.fixture(autouse=True)
def _leaves_madbench_cache_alone(request):
    """Fails the test that opened madbench's cache in the user's home (the default cache, a forgotten
    ``--cache-dir``), naming the paths."""
    _CURRENT["nodeid"] = request.node.nodeid
    before = {"madbench": _tree_state(Path(_WATCHED))}
    yield
    _CURRENT.pop("nodeid", None)
    touched = _TOUCHED.pop(request.node.nodeid, None)
    # The snapshot also sees the subprocesses and Ray workers the test started (the audit hook sees only this
    # process); under pytest-xdist a test on another worker may be the writer, hence "or one beside it".
    changed = home_changes(before, {"madbench": _tree_state(Path(_WATCHED))})
    message = None
    if touched:
        message = (f"the test opened madbench's cache in the user's home ({', '.join(sorted(touched)[:3])}): "
                   f"give it a temporary cache directory")
    elif changed:
        message = (f"madbench's cache in the user's home changed while this test (or one beside it on another "
                   f"worker) ran ({', '.join(changed[:3])}): give its commands a temporary cache directory")
    if message:
        if os.environ.get("MADBENCH_TEST_HOME_CHECK") == "warn":
            warnings.warn(message, stacklevel=1)
        else:
            pytest.fail(message, pytrace=False)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into the tests' ids
def pytest_collection_modifyitems(config, items):
    # Under pytest-xdist (the README's test command runs the suite on several workers): the tests that read the
    # session's finished rules-35 batch share one worker, so that it is made once, and so do the tests of a module
    # that share a fixture it keeps for the session (a batch made for them: each worker would make its own; a
    # module-scoped one would be made again whenever the worker ran another module's test between two of them); and
    # the slow tests start first, so that no long test starts last and leaves the other workers idle.
    for item in items:
        group = shared_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def shared_fixture_group(item) -> str | None:
    if "readme_rules35" in getattr(item, "fixturenames", ()):
        return "rules35"
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info is not None else None
        if defs and defs[-1].scope in ("module", "session") and defs[-1].baseid.endswith(".py"):  # a test module's own
            return f"{defs[-1].baseid}::{name}"
    return None


def _is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionstart(session):
    session.config._madbench_home = None if _is_xdist_worker(session.config) else home_state()


def pytest_sessionfinish(session, exitstatus):
    writer = session.config.get_terminal_writer()
    before = getattr(session.config, "_madbench_home", None)
    if before is None:
        return
    changed = home_changes(before, home_state())
    if not changed:
        return
    shown = "\n  ".join(changed[:20]) + (f"\n  … and {len(changed) - 20} more" if len(changed) > 20 else "")
    # A change under madbench's own cache, or a new, removed or rewritten entry of $HOME or ~/.cache (a browser's
    # crash database, a tool's settings), is the suite's doing, from a process a test started (the test-by-test
    # watch sees only the tests' own process), and fails the session. MADBENCH_TEST_HOME_CHECK=warn makes it a
    # warning, for a machine where madbench or a shell runs beside the suite.
    fail = os.environ.get("MADBENCH_TEST_HOME_CHECK") != "warn"
    writer.line(
        f"\n{'FAILED' if fail else 'WARNING'} the suite's hygiene: {len(changed)} path(s) in the user's home "
        f"changed during the session (tests must write under their temporary directories only):\n  {shown}",
        red=True, bold=True)
    if fail:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
