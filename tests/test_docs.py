"""The documentation: the site builds with no broken link, the generated reference covers every command, public
name, config field and column, the README keeps its promises, and the getting-started page's commands run."""

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import madbench
from madbench.results import FORMAT_VERSION, SPECS
from madbench.runner.cli import build_parser
from tests.conftest import readme_example, requires_shared

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def reference_hook():
    spec = importlib.util.spec_from_file_location("docs_reference_hook", DOCS / "_hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fenced_blocks(path: Path, cls: str) -> list[str]:
    """The bodies of the fenced blocks of ``path`` written ```{.bash .CLS}."""
    return re.findall(r"```\{\.bash \." + cls + r"\}\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def command_lines(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


# -- the site -----------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_site_builds_strict_with_no_broken_link_or_page_left_out(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                                           "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stderr[-4000:]
    for page in ("reference/cli", "reference/python-api", "reference/batch-and-config", "reference/tables", "changelog"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def test_every_markdown_page_is_in_the_nav_and_every_nav_entry_exists():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.UnsafeLoader)  # its !!python/name tag

    def entries(nav):
        for item in nav:
            for value in item.values():
                yield from entries(value) if isinstance(value, list) else [value]

    generated = {*reference_hook().GENERATED, "changelog.md"}
    listed = list(entries(config["nav"]))
    assert len(listed) == len(set(listed)), "a page is in the nav twice"
    in_nav = set(listed)
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert in_nav - generated == on_disk
    assert generated <= in_nav


# -- the generated reference ---------------------------------------------------------------------------------------

def walk(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if hasattr(action, "choices") and isinstance(action.choices, dict):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


def test_every_command_and_option_appears_in_the_generated_reference():
    page = reference_hook().page_cli()
    for path, parser in walk(build_parser()):
        if not path:
            continue
        assert re.search(r"^#+ madbench " + re.escape(" ".join(path)) + "$", page, re.M), path
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in page, (path, option)


def test_the_reference_shows_each_benchmark_with_its_own_options_only():
    page = reference_hook().page_cli()
    scale = page.split("## madbench bench scale\n", 1)[1].split("\n## ", 1)[0].split("\n### madbench bench ", 1)[0]
    assert "`--runs N [N ...]`" in scale and "--experiments" not in scale and "--price-model" not in scale


def test_every_public_name_is_in_the_python_api_reference():
    page = reference_hook().page_python_api()
    for name in madbench.__all__:
        assert f"## `madbench.{name}`" in page, name
    assert "### `Results.runs`" in page and "### `Results.stats(" in page  # inherited and own members


def test_every_batch_and_debate_config_field_is_in_the_reference():
    from madbench.debate.config import DebateConfig
    from madbench.runner.batch import BatchSpec
    page = reference_hook().page_config()
    for model in (BatchSpec, DebateConfig):
        for field in model.model_fields:
            assert f"| `{field}` |" in page, (model.__name__, field)
    # the comment above a field is its description
    assert "| `workers` | `int` | `2` | Runner actors" in page


def test_every_declared_column_is_in_the_tables_reference():
    page = reference_hook().page_tables()
    for table, spec in SPECS.items():
        section = page.split(f"## `{table}.parquet`", 1)[1].split("\n## ", 1)[0]
        for name in spec.schema.names:
            assert f"| `{name}` |" in section, (table, name)


def test_a_column_note_for_a_column_no_schema_declares_fails_the_build(monkeypatch):
    hook = reference_hook()
    monkeypatch.setitem(hook.COLUMN_NOTES, ("runs", "no_such_column"), "drifted")
    with pytest.raises(ValueError, match="runs.no_such_column"):
        hook.page_tables()


def test_the_changelog_lists_every_results_format():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    rows = [int(n) for n in re.findall(r"^\| (\d+) \|", text, re.M)]
    assert rows == list(range(1, FORMAT_VERSION + 1))


# -- the README ----------------------------------------------------------------------------------------------------

def test_the_readme_is_short_and_opens_with_the_two_commands():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    head = "\n".join(lines[:40])
    assert "pip install -e . && madbench demo" in head
    assert "pip install --no-cache-dir -e '.[test,local]' && python3 -m pytest -n 2" in head
    assert "python3 -m pytest -n 2" in (ROOT / ".ci" / "run").read_text()  # the README says what CI runs


def test_the_readmes_python_example_is_ten_lines_and_is_the_one_the_suite_runs():
    # conftest's readme_rules35 fixture runs this block as written (tests/test_api.py checks what it returns)
    example = readme_example()
    assert len(example.splitlines()) <= 10
    assert 'madbench.run("configs/batches/rules-35.yaml"' in example and "res.report()" in example


@requires_shared
@pytest.mark.slow
def test_the_readmes_python_example_runs_as_written_offline_in_a_scratch_folder(readme_rules35):
    here, namespace = readme_rules35  # conftest ran the block verbatim, from a scratch folder holding configs/
    run = namespace["run"]
    assert (run.ok, run.failed, run.pending) == (105, 0, 0)
    assert (here / "results" / "rules-35" / "report.html").is_file()  # its last line wrote the report


def test_every_relative_link_in_the_readme_and_changelog_points_at_a_file():
    for doc in ("README.md", "CHANGELOG.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (ROOT / target).exists(), f"{doc} links to {target}, which does not exist"


# -- the getting-started page --------------------------------------------------------------------------------------

GETTING_STARTED = DOCS / "getting-started.md"


def test_the_getting_started_commands_are_commands_madbench_has():
    blocks = fenced_blocks(GETTING_STARTED, "offline") + fenced_blocks(GETTING_STARTED, "demo")
    assert len(blocks) >= 3
    parser = build_parser()
    for line in (line for block in blocks for line in command_lines(block)):
        argv = shlex.split(line, comments=True)
        assert argv[0] == "madbench", line
        parser.parse_args(argv[1:])  # argparse exits 2 on a command or option that does not exist


def run_blocks(blocks: list[str], where: Path) -> None:
    """Each command of ``blocks`` in order, from ``where`` (a copy of configs/ beside it), with madbench's cache under
    it (its home is the session's, which conftest keeps short enough for Ray's socket paths): exit status 0 for each."""
    shutil.copytree(ROOT / "configs", where / "configs")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MADBENCH_CACHE_DIR": str(where / "cache")}
    for line in (line for block in blocks for line in command_lines(block)):
        out = subprocess.run(line, shell=True, cwd=where, env=env, capture_output=True, text=True, timeout=1800)
        assert out.returncode == 0, f"{line}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"


@requires_shared
@pytest.mark.slow
def test_the_getting_started_offline_commands_run_as_written(tmp_path):
    run_blocks(fenced_blocks(GETTING_STARTED, "offline"), tmp_path)
    assert (tmp_path / "results" / "rules-35" / "report.html").is_file()
    assert any((tmp_path / "results" / "debates").iterdir())


@requires_shared
@pytest.mark.slow
def test_the_getting_started_demo_runs_as_written(tmp_path):
    run_blocks(fenced_blocks(GETTING_STARTED, "demo"), tmp_path)
    assert (tmp_path / "results" / "summary.md").is_file()


def documented_files(page: Path) -> dict[str, str]:
    """The YAML blocks of ``page`` that open with a ``# path`` comment naming where to save them: path -> text."""
    blocks = re.findall(r"```yaml\n# ([\w./-]+\.yaml)[^\n]*\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    return {path: text for path, text in blocks}


def test_the_ablation_howto_runs_the_batch_it_says_where_to_save_and_its_paths_resolve_from_there():
    page = DOCS / "howto" / "ablation.md"
    files = documented_files(page)
    batches = {p: yaml.safe_load(t) for p, t in files.items() if "configs" in (yaml.safe_load(t) or {})}
    assert batches, "the page shows no batch file with the path to save it at"
    for path, batch in batches.items():
        folder = (ROOT / path).parent
        for rel in [batch["scenarios"]["file"], *batch["configs"]]:
            target = (folder / rel).resolve()
            assert target.is_file() or str(target.relative_to(ROOT)) in files, f"{path}: {rel} resolves to {target}"
        assert (folder / batch["results_dir"]).resolve() == ROOT / "results", path
    runs = re.findall(r"madbench run (\S+\.yaml)", page.read_text(encoding="utf-8"))
    assert runs and all(r in batches for r in runs), runs
