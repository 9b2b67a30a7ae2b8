"""A template is rendered within limits (output, time, growth), a sandbox violation names the
template, and `madbench run --dry-run` renders every template a batch uses once, so a bad one fails before any run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import yaml

import madbench.debate.profiles as profiles
import madbench.debate.protocols.staged as staged
from madbench.data.errors import InputError
from madbench.data.templates import MAX_PROMPT_CHARS_ENV, MAX_RENDER_S_ENV, compile_template
from madbench.runner.cli import main
from tests.conftest import errors_only
from tests.runner.test_batch import ROOT, TICKERS, write_batch

NESTED = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"


def render(text: str, **variables) -> str:
    return compile_template(text, set(variables), "roles/x.yaml: phases.propose").render(**variables)


@pytest.mark.parametrize("text,unsafe", [
    ("{{ ''.__class__.__mro__ }}", "'__class__' of 'str'"),
    ("{{ cycler.__init__.__globals__ }}", "'__init__'"),
    ("{{ memo.__class__.__subclasses__() }}", "'__class__' of 'str'"),
])
def test_a_sandbox_violation_is_an_input_error_naming_the_template(text, unsafe):
    with pytest.raises(InputError, match=r"^roles/x.yaml: phases.propose: unsafe template: access to attribute " + unsafe):
        render(text, memo="m") if "memo" in text else render(text)


@pytest.mark.parametrize("text", [
    NESTED,                                                              # nested loops writing output
    "{{ 'x' * 10**9 }}",                                                 # one repetition, refused before it is built
    "{{ [0] * 10**9 }}",
    "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
    "{{ 'x'|center(10**9) }}",
    "{{ 'x'.ljust(10**9) }}",
    "{{ memo|indent(10**8) }}",
])
def test_a_template_rendering_past_the_prompt_limit_fails_naming_it(text, monkeypatch):
    monkeypatch.setenv(MAX_PROMPT_CHARS_ENV, "100000")
    t0 = time.monotonic()
    with pytest.raises(InputError, match=r"^roles/x.yaml: phases.propose: the template renders over 100,000 characters"):
        render(text, memo="a\nb") if "memo" in text else render(text)
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("text", [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",  # no output at all
    "{% set s %}" + NESTED + "{% endset %}{{ s|length }}",                                 # output kept in a variable
])
def test_a_runaway_template_is_stopped_by_the_render_time_limit(text, monkeypatch):
    monkeypatch.setenv(MAX_RENDER_S_ENV, "0.3")
    t0 = time.monotonic()
    with pytest.raises(InputError, match=r"^roles/x.yaml: phases.propose: the template took over 0.3 s to render"):
        render(text)
    assert time.monotonic() - t0 < 5


#: Each builds gigabytes from a few characters, by a way the growth checks of ``*`` and ``+`` do not see. Each must be
#: refused with the size limit, before it allocates: in ``compile_template`` (where jinja folds constant expressions)
#: as much as in ``render``.
RUNAWAY = [
    "{{ 'x'|center(900000000) }}",                                    # a constant filter: folded at compile time
    "{{ '%900000000s' % 'x' }}",                                       # %-formatting: the width in the format
    "{{ '%.900000000f' % 1.5 }}",                                      # and the precision
    "{{ '%*s' % (900000000, 'x') }}",                                  # and a width given as an argument
    "{{ '%900000000s'|format('x') }}",
    "{% set s = 'a' * 100000 %}{{ s|replace('a', s) }}",               # 10^10 characters from two of 10^5
    "{% set s = 'a' * 100000 %}{{ s.replace('a', s) }}",
    "{{ '{:>999999999}'.format('x') }}",                               # str.format widths
    "{{ '{:>{w}}'.format('x', w=999999999) }}",
    "{{ '{a:.999999999f}'.format_map({'a': 1.5}) }}",
    "{{ 'x'.rjust(900000000) }}",
    "{{ 'x'|indent(900000000) }}",
    "{{ ('x\\n' * 100000)|indent(' ' * 1000) }}",                  # an indent given as a string, on every line
    "{{ 'a b c'|wordwrap(1, true, 'y' * 1000000) }}",
    "{{ ('\t' * 100000).expandtabs(100000) }}",
    "{% set s = 'a' * 1000000 %}{{ ([s] * 1000)|join }}",              # a list of references, then joined
    "{% set s = 'a' * 1000000 %}{{ 'x'.join([s] * 1000) }}",
    "{% set s = 'a' * 1000000 %}{{ [s] * 1000 }}",                     # ... or written out whole
    "{% set s = 'a' * 1000000 %}{{ ([s] * 1000)|tojson }}",
    "{% set s = 'a' * 1000000 %}{% set x %}{% for i in range(10000) %}{{ s }}{% endfor %}{% endset %}{{ x|length }}",
    "{% set l = [1] %}{% for i in range(40) %}{% set _ = l.extend(l) %}{% endfor %}{{ l|length }}",
    "{{ [1]|batch(900000000, 'x')|list|length }}",
    "{{ ('a.co ' * 100000)|urlize(target='t' * 100000) }}",
    "{% filter center(900000000) %}x{% endfilter %}",
    "{% macro m() %}{{ 'x'|center(900000000) }}{% endmacro %}{{ m() }}",
]

ISOLATED = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))  # a regression fails here, not the machine
from madbench.data.templates import compile_template
out = []
for text in json.loads(sys.argv[1]):
    t0 = time.monotonic()
    try:
        compile_template(text, set(), "roles/x.yaml: phases.propose").render()
        out.append(["rendered", "", 0.0])
    except BaseException as exc:  # MemoryError included: the case is then a failure, reported by the test
        out.append([type(exc).__name__, str(exc)[:300], time.monotonic() - t0])
print(json.dumps(out))
"""


def test_templates_that_would_allocate_without_bound_are_refused_before_allocating():
    proc = subprocess.run([sys.executable, "-c", ISOLATED, json.dumps(RUNAWAY)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=os.environ | {"PYTHONPATH": str(ROOT), MAX_PROMPT_CHARS_ENV: "2000000"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    for text, (kind, message, seconds) in zip(RUNAWAY, json.loads(proc.stdout), strict=True):
        assert kind == "InputError", (text, kind, message)
        assert message.startswith("roles/x.yaml: phases.propose: the template ") and (
            "renders over 2,000,000 characters" in message or "writes over 8,000,000 characters in all" in message), text
        assert seconds < 10, (text, seconds)


def test_bounded_filters_and_methods_give_what_jinja_gives():
    text = ("{{ '%5s|%-3d|%.2f' % ('ab', 7, 1.5) }} {{ '%(k)s' % {'k': 'v'} }} {{ '%s!'|format('hi') }} "
            "{{ 'a-b-b'|replace('b', 'xy') }} {{ 'a-b-b'.replace('b', 'xy', 1) }} {{ '{:>4}{}'.format('a', 'b') }} "
            "{{ '{x:*^5}'.format_map({'x': 'm'}) }} {{ ['a', 'b']|join(', ') }} {{ ', '.join(['c', 'd']) }} "
            "{{ 'a\tb'.expandtabs(4) }} {{ 'abc'|center(7) }}| {{ 'one two three'|wordwrap(7) }} {{ 'x'.zfill(3) }} "
            "{{ [1, 2, 3]|batch(2, 0)|list }} {{ {'a': [1, 'b']}|tojson }} {{ 'long text here'|truncate(9, true, '..', 0) }}")
    assert render(text) == ("   ab|7  |1.50 v hi! a-xy-xy a-xy-b    ab **m** a, b c, d a   b   abc  | one two\nthree 00x "
                            "[[1, 2], [3, 0]] {\"a\": [1, \"b\"]} long te..")


def test_ranges_and_powers_past_the_sandbox_limits_are_named():
    with pytest.raises(InputError, match="phases.propose: the template overflows: Range too big"):
        render("{% for i in range(10**6) %}{% for j in range(10**6) %}x{% endfor %}{% endfor %}")
    with pytest.raises(InputError, match="phases.propose: the template computes an integer power past"):
        render("{{ 10**(10**10) }}")


def test_ordinary_templates_render_as_before(monkeypatch):
    text = ("{% for p in peers %}{{ loop.index }}/{{ loop.length }} {{ p.agent_id }}{% if not loop.last %}, {% endif %}"
            "{% else %}none{% endfor %} | {{ 'a' ~ 'b' }} {{ 2 * 3 }} {{ 2 ** 10 }} {{ 'x'|center(5) }}|{{ [1, 2] + [3] }}")
    peers = [{"agent_id": "macro"}, {"agent_id": "value"}]
    assert render(text, peers=peers) == "1/2 macro, 2/2 value | ab 6 1024   x  |[1, 2, 3]"
    assert render(text, peers=[]).startswith("none |")
    monkeypatch.setenv(MAX_PROMPT_CHARS_ENV, "many")
    with pytest.raises(InputError, match=f"^{MAX_PROMPT_CHARS_ENV}: 'many' is not a positive int"):
        render("x")


# -- preflight: every template a batch uses, rendered once before any run


@pytest.fixture
def user_roles(tmp_path, monkeypatch):
    """A copy of the role profiles that the tests edit, used in place of configs/roles (as a user edits theirs)."""
    d = tmp_path / "roles"
    shutil.copytree(profiles.ROLES_DIR, d)
    monkeypatch.setattr(profiles, "ROLES_DIR", d)
    return d


@pytest.fixture
def user_protocols(tmp_path, monkeypatch):
    d = tmp_path / "protocols"
    shutil.copytree(staged.PROTOCOL_PROMPTS, d)
    monkeypatch.setattr(staged, "PROTOCOL_PROMPTS", d)
    staged.load_prompt_file.cache_clear()
    yield d
    staged.load_prompt_file.cache_clear()


def _override(roles, role: str, phase: str, variables: list[str], template: str) -> None:
    spec = yaml.safe_load((roles / f"{role}.yaml").read_text())
    spec["phases"] = {phase: {"variables": variables, "template": template}}
    (roles / f"{role}.yaml").write_text(yaml.safe_dump(spec))


def _dry_run(tmp_path, make_pack, capsys, config: str, lines: int = 1) -> str:
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1, configs=[str(ROOT / config)])
    t0 = time.monotonic()
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert time.monotonic() - t0 < 60
    err = errors_only(capsys.readouterr().err)
    assert err.count("\n") == lines and "Traceback" not in err, err
    return err


def test_dry_run_names_a_sandbox_violation_in_a_critique_template_the_first_prompt_never_shows(
        user_roles, make_pack, tmp_path, capsys):
    # single-causal never debates (rounds: 0): its critique template is rendered by the preflight all the same.
    _override(user_roles, "macro", "critique", ["peers"], "{{ peers }}{{ cycler.__init__.__globals__ }}")
    err = _dry_run(tmp_path, make_pack, capsys, "configs/debate/single-causal.yaml")
    assert "found before any model call: config single-causal: agent macro (macro/causal) critique prompt: " in err
    assert f"{user_roles / 'macro.yaml'}: phases.critique: unsafe template: access to attribute '__init__'" in err


def test_dry_run_names_a_sandbox_violation_in_the_judge_template(user_roles, make_pack, tmp_path, capsys):
    _override(user_roles, "judge", "judge", ["finals"], "{{ finals }}{{ ''.__class__.__mro__ }}")
    err = _dry_run(tmp_path, make_pack, capsys, "configs/debate/causal-debate-3.yaml")
    assert f"judge (judge/causal) judge prompt: {user_roles / 'judge.yaml'}: phases.judge: unsafe template" in err


def test_dry_run_stops_a_runaway_role_template_and_names_it(user_roles, make_pack, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(MAX_RENDER_S_ENV, "0.5")
    _override(user_roles, "macro", "revise", ["own"], "{{ own }}{% for i in range(100000) %}{% for j in range(100000) %}"
              "{% endfor %}{% endfor %}")
    err = _dry_run(tmp_path, make_pack, capsys, "configs/debate/single-causal.yaml")
    assert f"{user_roles / 'macro.yaml'}: phases.revise: the template took over 0.5 s to render" in err


def test_dry_run_names_a_sandbox_violation_in_a_staged_protocol_prompt(user_protocols, make_pack, tmp_path, capsys):
    path = user_protocols / "desks.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["stages"]["debate_map"]["template"] += "{{ reports.__class__.__base__.__subclasses__() }}"
    path.write_text(yaml.safe_dump(spec))
    err = _dry_run(tmp_path, make_pack, capsys, "configs/debate/desks.yaml")
    assert f"config desks: desks stage debate_map prompt: {path}: stages.debate_map.template: unsafe template" in err


def test_a_prompt_over_the_size_limit_fails_the_dry_run(make_pack, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(MAX_PROMPT_CHARS_ENV, "2000")  # the memo alone is longer
    err = _dry_run(tmp_path, make_pack, capsys, "configs/debate/single-causal.yaml")
    # The memo is in the shared context (the system message every turn begins with), rendered once per profile.
    assert "agent macro (macro/causal) shared context: " in err and "context: the template renders over 2,000 " in err
    assert MAX_PROMPT_CHARS_ENV in err
