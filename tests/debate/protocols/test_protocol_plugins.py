"""Protocols, scorers and run metrics as plug-ins: every shipped protocol is a Protocol found the way a researcher's
own is (name, import path, entry point); nothing outside a protocol's own module compares a protocol's name; a bad
name or import path is one InputError naming the file and the field."""

from __future__ import annotations

import ast
import shutil
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml

from madbench.data import plugins
from madbench.data.errors import InputError
from madbench.data.scenario import Scenario
from madbench.debate.config import PhaseTokens
from madbench.debate.config_file import load_debate_config
from madbench.debate.protocols import load_protocol, protocol_named, protocol_plan
from madbench.debate.protocols.plan import plan_calls
from madbench.debate.protocols.protocol import Protocol
from madbench.debate.protocols.registry import BUILTIN
from madbench.debate.protocols.staged import SLICES
from madbench.gateway.phases import PHASES
from madbench.runner.pipeline import run_id_for

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "custom-protocol"
#: The package's source folders, laid out as in the checkout (pyproject's package-dir).
SOURCE = ("madbench", "debate", "runner", "scoring", "eval")
BASE = {"name": "t", "agents": [{"role": "macro"}, {"role": "value"}], "rounds": 1}


@pytest.fixture(autouse=True)
def _own_imports_undone(monkeypatch):
    """What these tests import from their temporary folders is forgotten after each (the next one has its own)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(plugins, "_ROOTS", [])
    protocol_named.cache_clear()
    yield
    protocol_named.cache_clear()
    for name in ("jury", "lab_jury"):
        sys.modules.pop(name, None)


@cache
def ready_configs() -> list:
    return [load_debate_config(p) for p in sorted((ROOT / "configs" / "debate").glob("*.yaml"))]


def _names_protocol(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and "protocol" in node.attr) or (isinstance(node, ast.Name) and "protocol" in node.id)


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def name_comparisons(path: Path) -> list[str]:
    """Where ``path`` decides by a protocol's name: a comparison of something named ``protocol`` with a string, a
    comparison involving a shipped protocol's name and a ``protocol`` field, or a table keyed by protocol names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_protocol(s) for s in sides) and any(_strings(s) for s in sides if not _names_protocol(s)):
                found.append(f"{path}:{node.lineno}")
        elif isinstance(node, ast.Dict):
            keyed = set().union(*(_strings(k) for k in node.keys if k is not None)) if node.keys else set()
            if len(keyed & set(BUILTIN)) >= 2 and path.name != "registry.py":
                found.append(f"{path}:{node.lineno}")
    return found


def test_no_protocol_name_is_compared_outside_the_protocols_own_modules():
    sources = [p for d in SOURCE for p in (ROOT / d).rglob("*.py") if (ROOT / "debate" / "protocols") not in p.parents]
    assert len(sources) > 100
    assert [hit for p in sources for hit in name_comparisons(p)] == []


def test_the_check_finds_a_name_comparison(tmp_path):
    """The check above can fail: each form it looks for is found."""
    bad = tmp_path / "bad.py"
    bad.write_text('if cfg.protocol != "paper":\n    pass\nx = c.protocol in ("paper", "self_consistency")\n'
                   'T = {("desks", "desk"): 1, ("adversarial", "cio"): 2}\n')
    assert [h.rsplit(":", 1)[1] for h in name_comparisons(bad)] == ["1", "3", "4"]


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_every_shipped_protocol_is_a_protocol_with_rule_answers_for_its_stages(name):
    protocol = load_protocol(name)
    assert isinstance(protocol, Protocol)
    cfg = next(c for c in ready_configs() if c.protocol == name)
    plan = protocol_plan(cfg, SLICES)
    assert plan.steps and plan.prompts == protocol.prompts
    if protocol.prompts == "stages":  # each stage it asks has a prompt and an offline answer
        prompts = yaml.safe_load(protocol.prompt_file().read_text())["stages"]
        stages = {c.kind for c, _, _ in plan_calls(plan) if c.schema is not None}
        assert stages and stages <= set(protocol.rule_answers) and stages <= set(prompts)


def test_phase_budgets_name_every_phase_once():
    assert tuple(PhaseTokens.model_fields) == PHASES


def _config(tmp_path: Path, **over) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**BASE, **over}))
    return path


@pytest.mark.parametrize("over,message", [
    ({"protocol": "parliament"}, "protocol: unknown protocol 'parliament' (fix: use one of: paper"),
    ({"protocol": "nowhere_at_all:Jury"}, "protocol: no module 'nowhere_at_all' on the Python path or in"),
    ({"protocol": "madbench.no_such_module:Jury"}, "protocol: no module 'madbench.no_such_module'"),
    ({"protocol": "jury:Juror"}, "protocol: module jury ("),
    ({"protocol": "jury:"}, "protocol: 'jury:' is not an import path"),
    ({"protocol": "jury:JuryOptions"}, "protocol: 'jury:JuryOptions' is <class 'jury.JuryOptions'>, not a Protocol"),
    ({"protocol": "jury:Jury", "options": {"jurors": 1}}, "options: jurors: Input should be greater than or equal to 2"),
    ({"protocol": "paper", "agents": []}, "agents: the paper protocol needs at least one agent"),
    ({"metrics": ["jury:no_such_metric"]}, "metrics: module jury ("),
    ({"metrics": ["sharpness"]}, "metrics: unknown metric 'sharpness'"),
    ({"scorer": "nowhere_at_all:build"}, "scorer: no module 'nowhere_at_all'"),
])
def test_a_bad_protocol_metric_or_scorer_is_one_error_naming_file_and_field(tmp_path, over, message):
    shutil.copy(EXAMPLE / "jury.py", tmp_path / "jury.py")
    shutil.copy(EXAMPLE / "jury_prompts.yaml", tmp_path / "jury_prompts.yaml")
    path = _config(tmp_path, **over)
    with pytest.raises(InputError) as err:
        load_debate_config(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value) and "\n" not in str(err.value)


def test_a_protocol_of_the_users_own_is_found_beside_its_config(tmp_path):
    shutil.copy(EXAMPLE / "jury.py", tmp_path / "jury.py")
    shutil.copy(EXAMPLE / "jury_prompts.yaml", tmp_path / "jury_prompts.yaml")
    cfg = load_debate_config(_config(tmp_path, protocol="jury:Jury", agents=[], options={"jurors": 4}))
    plan = protocol_plan(cfg)
    assert plan.calls_by_kind() == {"proposal": 4, "vote": 4}


def test_an_installed_package_registers_a_protocol_by_entry_point(tmp_path, monkeypatch):
    """A distribution on the path whose entry points name ``madbench.protocols`` adds a protocol by name."""
    shutil.copy(EXAMPLE / "jury.py", tmp_path / "lab_jury.py")
    shutil.copy(EXAMPLE / "jury_prompts.yaml", tmp_path / "jury_prompts.yaml")
    info = tmp_path / "lab_jury-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-jury\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[madbench.protocols]\nlab-jury = lab_jury:Jury\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    protocol = load_protocol("lab-jury")
    assert type(protocol).__name__ == "Jury" and type(protocol).__module__ == "lab_jury"


def test_run_ids_do_not_see_run_metrics_nor_the_default_scorer():
    cfg = load_debate_config(ROOT / "configs" / "debate" / "causal-debate-3.yaml")
    scenario = Scenario(id="s", invest_quarter="2022Q2", tickers=["AAA", "BBB", "CCC"])
    plain = run_id_for(scenario, cfg, 0)
    assert run_id_for(scenario, cfg.model_copy(update={"metrics": ["concentration"]}), 0) == plain
    assert run_id_for(scenario, cfg.model_copy(update={"scorer": "crit"}), 0) == plain
    assert run_id_for(scenario, cfg.model_copy(update={"scorer": "my_lab:judge"}), 0) != plain
    assert "scorer" not in cfg.model_dump() and "metrics" not in cfg.model_dump()
