"""A config's scorer: the shipped CRIT and RCA judges by default, or a factory of the researcher's own by import path,
found beside the config; a factory that builds no scorer is one InputError naming the config and field."""

from __future__ import annotations

import sys

import pytest
import yaml

from madbench.data import plugins
from madbench.data.errors import InputError
from madbench.debate.config_file import load_debate_config
from madbench.scoring.debate_scorer import DebateScorer
from madbench.scoring.scorers import scorer_for

JUDGES = '''
from madbench.scoring.debate_scorer import DebateScorer, crit_scorer


class Stricter(DebateScorer):
    pass


def build(config):
    return Stricter(crit_scorer(config).rubric)


def nothing(config):
    return object()
'''


@pytest.fixture
def lab(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(plugins, "_ROOTS", [])
    (tmp_path / "lab_judges.py").write_text(JUDGES)
    yield tmp_path
    sys.modules.pop("lab_judges", None)


def config(folder, scorer: str):
    path = folder / "c.yaml"
    path.write_text(yaml.safe_dump({"name": "c", "agents": [{"role": "macro"}], "scorer": scorer}))
    return load_debate_config(path)


def test_the_default_scorer_is_crit_and_rca_on_the_configs_rubric(lab):
    scorer = scorer_for(config(lab, "crit"))
    assert type(scorer) is DebateScorer and scorer.rubric.name == "uniform"


def test_a_scorer_of_the_researchers_own_is_built_from_beside_its_config(lab):
    scorer = scorer_for(config(lab, "lab_judges:build"))
    assert type(scorer).__name__ == "Stricter" and isinstance(scorer, DebateScorer)
    assert plugins.code_roots() == [lab.resolve()]  # what the Ray workers are given to import it


def test_a_factory_that_builds_no_scorer_is_refused(lab):
    with pytest.raises(InputError, match=r"^config c: scorer: lab_judges:nothing built <object object at .*>, which has "
                                         r"no crit or rca method"):
        scorer_for(config(lab, "lab_judges:nothing"))
