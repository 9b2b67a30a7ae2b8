"""Everything that would make a batch fail, found before Ray starts and before any paid call.

Each check collects its problems instead of stopping at the first, so one `madbench run` (or `--dry-run`)
names them all, each with where it comes from:

* every model a run can reach (its fallbacks too) has its key and accepts the configured parameters, and every
  scenario's memo fits in its context window (both from litellm's model information);
* every scenario's memo builds and its allocation can be backtested: the as-of close, the holding quarter,
  and the history each baseline needs;
* every prompt template a config uses renders on a real memo, in the sandbox and within the render limits;
* the cache and results directories are writable;
* under a ``max_cost_usd``, every model has a known price (else the cap could not hold);
* last, once everything else holds, every configured ``api_base`` answers at all (``endpoint_problems``).
"""

from __future__ import annotations

import difflib
import os
import socket
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from madbench.data.blind import blind_memo, pack_companies
from madbench.data.errors import InputError
from madbench.data.market.pack import Pack
from madbench.data.memo import Memo, build_memo
from madbench.data.residue import memo_residue
from madbench.data.scenario import Scenario, check_against_pack
from madbench.debate.config import DebateConfig
from madbench.debate.context import constraints_text
from madbench.debate.profiles import Profile, load_profile
from madbench.debate.protocols import protocol_of
from madbench.debate.protocols.staged import load_prompts
from madbench.debate.schemas import CritiqueItem
from madbench.eval.backtest import holding_window
from madbench.eval.baselines import baseline_metrics
from madbench.gateway.cache import blocks_writing
from madbench.gateway.models import ModelSpec, as_spec, spec_cost
from madbench.gateway.providers.base import SendOnly
from madbench.gateway.providers.litellm_provider import LiteLLMProvider, listed, nearest_models
from madbench.runner.batch import RunSpec
from madbench.runner.wiring import build_providers
from madbench.scoring.rule_answers import HANDLERS


def reachable_models(config: DebateConfig, every_use: bool = False) -> list[tuple[str, str, ModelSpec]]:
    """(role, phase, spec) of every model a run of ``config`` may call, fallbacks included: each model once, or with
    ``every_use`` once per role and phase that reaches it (phases differ in temperature and answer budget, and a
    problem names every role it arises in)."""
    routing = config.models
    out, seen = [], set()
    for role, phase in sorted(protocol_of(config).routed(config)):
        todo = [routing.resolve(role, phase)]
        while todo:
            spec = todo.pop(0)
            key = (spec.model_dump_json(), (role, phase) if every_use else "")
            if key not in seen:
                seen.add(key)
                out.append((role, phase, spec))
            todo += [as_spec(f) for f in spec.fallbacks]
    return out


def probe_temperature(provider: Any, spec: ModelSpec, own: float) -> float:
    """The temperature the leakage audit's identification probe asks ``spec`` at: 0 (the most likely answer) where the
    model takes it, else ``own``, the temperature its debate calls are configured with (gpt-5 takes only 1)."""
    at_zero = {str(p) for p in provider.preflight(spec, 0.0, None)}
    return 0.0 if at_zero <= {str(p) for p in provider.preflight(spec, own, None)} else own


def probe_calls(configs: list[DebateConfig], providers: Any = None) -> list[tuple[ModelSpec, float]]:
    """(spec, temperature) of every model the leakage audit probes: each model the blind ``configs`` reach, once."""
    providers = providers or build_providers()
    seen: dict[str, tuple[ModelSpec, float]] = {}
    for config in configs:
        for _, _, spec in reachable_models(config):
            key = spec.model_dump_json()
            if key not in seen:
                seen[key] = (spec, probe_temperature(providers.for_model(spec.model), spec, config.temperature))
    return list(seen.values())


def probe_problems(configs: list[DebateConfig]) -> list[str]:
    """What the leakage audit's probe calls would be refused for (temperature, structured output) by the blind
    ``configs``' models, checked as the debate's calls are. A missing key is the debate's to report, once."""
    providers = build_providers()
    blind = [c for c in configs if c.blind.enabled]
    return [f"{p} (the leakage audit's identification probe, at temperature {t:g})"
            for spec, t in probe_calls(blind, providers)
            for p in providers.for_model(spec.model).preflight(spec, t, None) if not isinstance(p, SendOnly)]


def model_problems(configs: list[DebateConfig]) -> list[str]:
    """Each distinct problem once, with where it arises (configs, and the roles and phases that reach the model)."""
    where: dict[str, dict[str, set[str]]] = {}
    found: dict[tuple[str, float, int | None], list[str]] = {}
    providers = build_providers()
    for config in configs:
        for role, phase, spec in reachable_models(config, every_use=True):
            temperature = config.crit_temperature if phase in ("crit", "rca") else config.temperature
            max_tokens = getattr(config.max_tokens, phase, None)
            asked = (spec.model_dump_json(), temperature, max_tokens)
            if asked not in found:
                found[asked] = providers.for_model(spec.model).preflight(spec, temperature, max_tokens)
            for p in found[asked]:
                where.setdefault(p, {}).setdefault(config.name, set()).add(phase if role in (phase, "default")
                                                                            else f"{role} {phase}")
    def places(cs: dict[str, set[str]]) -> str:
        return "; ".join(f"config {c}: {', '.join(sorted(uses))}" for c, uses in sorted(cs.items()))
    return [(SendOnly if isinstance(p, SendOnly) else str)(f"{p} ({places(cs)})") for p, cs in sorted(where.items())]


def rule_model_problems(configs: list[DebateConfig]) -> list[str]:
    """Every ``rules/NAME`` a config routes to (its fallbacks too) names a rule-based answerer (``rules/auto``: each
    role its own), as written, before ``rules/auto`` is resolved per role: a typo would fail every call it answers."""
    known = ["auto", *HANDLERS]
    where: dict[str, set[str]] = {}
    for config in configs:
        for spec in config.models.named_specs():
            name = spec.model.split("/", 1)[1] if spec.model.startswith("rules/") else None
            if name is not None and name not in known:
                where.setdefault(spec.model, set()).add(config.name)
    out = []
    for model, names in sorted(where.items()):
        near = difflib.get_close_matches(model, [f"rules/{k}" for k in known], n=3)
        hint = f"nearest: {', '.join(near)}; " if near else ""
        out.append(f"{model}: unknown rule-based model (config {', '.join(sorted(names))}): {hint}known: "
                   f"{', '.join('rules/' + k for k in known)}")
    return out


def context_problems(configs: list[DebateConfig], memos: dict[str, Memo]) -> list[str]:
    """A memo longer than a model's context window (``max_input_tokens`` in litellm's model info) is an error before
    any call, naming the scenario, its token count and the model. Tokens are counted by ``litellm.token_counter``
    (OpenAI's tokenizers; for other models an estimate with OpenAI's cl100k), and only for a memo with more UTF-8
    bytes than the window: a byte-level BPE token is at least one byte, so a shorter memo fits uncounted. The memo is
    only part of a prompt: one that fits may still leave a later turn's prompt too long, which the provider refuses."""
    where: dict[str, set[str]] = {}
    counted: dict[tuple[str, str], int] = {}
    providers = build_providers()
    for config in configs:
        for _, _, spec in reachable_models(config):
            provider = providers.for_model(spec.model)
            if not isinstance(provider, LiteLLMProvider):
                continue  # no hosted model: nothing to check against
            window = provider.context_window(spec)
            if window is None:
                continue  # a model litellm does not know
            for sid, memo in memos.items():
                if len(memo.text.encode()) <= window:
                    continue
                if (spec.model, sid) not in counted:
                    counted[spec.model, sid] = provider.count_tokens(spec, memo.text)
                n = counted[spec.model, sid]
                if n > window:
                    line = (f"scenario {sid}: its memo alone is {n:,} tokens (litellm.token_counter), more than {spec.model}'s "
                            f"context window of {window:,} input tokens (litellm model info); use a model with a larger "
                            "window, or fewer tickers or less evidence in the scenario")
                    where.setdefault(line, set()).add(config.name)
    return [f"{line} (config {', '.join(sorted(names))})" for line, names in sorted(where.items())]


def scenario_problems(scenarios: list[Scenario], pack: Pack, where: str) -> tuple[dict[str, Memo], list[str]]:
    """The memo of every scenario that has one, and what stops the others from running or being backtested."""
    memos, problems = {}, []
    for s in scenarios:
        here = f"{where}: scenario {s.id}"
        try:
            check_against_pack(s, pack, here)
            memos[s.id] = build_memo(s, pack, here)
            window = holding_window(pack, s.quarter, s.tickers, where=here)
            baseline_metrics(pack, s.quarter, s.tickers, window=window)
        except InputError as exc:  # collected so that every scenario's problem is named in one pass
            problems.append(str(exc))
    return memos, problems


def _sample_critique() -> dict[str, Any]:
    item = CritiqueItem(target_agent="peer", target_claim="C1", critique_text="(a critique)", evidence_ids=[],
                        portfolio_implication="", suggested_adjustment="", falsifier="", objection_confidence=0.5)
    return {"from_agent": "peer", **item.model_dump()}


def paper_samples(profile: Profile, config: DebateConfig, common: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What the paper protocol supplies to each phase's template (debate.protocols.paper), with one peer, one critique
    and one nudge: the shapes its templates iterate over."""
    peer = {"agent_id": "peer", "role": "peer", "output": "{}"}
    return {"propose": {**common, "round": 0},
            "critique": {**common, "peers": [peer], "tone": profile.tone(config.pid.beta0)},
            "revise": {**common, "own": "{}", "critiques": [_sample_critique()], "nudges": ["(a nudge)"]},
            "judge": {**common, "finals": [peer]}}


def _failure(exc: Exception, where: str) -> str:
    """An InputError from the render already names its template; anything else gets the template's place."""
    return str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc} (in {where})"


def paper_prompt_problems(config: DebateConfig, scenario: Scenario, memo: Memo, constraints: str) -> list[str]:
    """Every template of every profile the config uses (each agent's propose, critique and revise; the judge's), once."""
    speakers = [(f"agent {a.agent_id}", a.agent_id, a.role, a.tier) for a in config.agents]
    if config.aggregation == "judge":
        speakers.append(("judge", "judge", "judge", config.judge_tier))
    problems, seen = [], set()
    for who, agent_id, role, tier in speakers:
        if (role, tier) in seen:
            continue  # one render per profile: agents that share one share its templates
        seen.add((role, tier))
        profile = load_profile(role, tier)
        common = {"memo": memo.text, "universe": list(scenario.tickers), "constraints": constraints, "agent_id": agent_id,
                  "role": role, "round": 1, "schema": "{}"}
        phases = ("judge",) if role == "judge" else ("propose", "critique", "revise")
        samples = paper_samples(profile, config, common)
        try:  # the system message: the shared context (the memo) that every turn of the tier begins with
            profile.render_context(memo=memo.text, universe=list(scenario.tickers), constraints=constraints)
        except Exception as exc:  # any template failure is a config problem to report with the others
            problems.append(f"config {config.name}: {who} ({role}/{tier}) shared context: {_failure(exc, f'{role}/{tier} context')}")
        for phase in phases:
            try:
                profile.render(phase, **samples[phase])
            except Exception as exc:  # any template failure is a config problem to report with the others
                problems.append(f"config {config.name}: {who} ({role}/{tier}) {phase} prompt: "
                                f"{_failure(exc, profile.templates[phase][1].where)}")
    return problems


def staged_prompt_problems(config: DebateConfig, scenario: Scenario, memo: Memo, constraints: str) -> list[str]:
    """Every stage prompt of a staged protocol, once. Its dynamic inputs are JSON text the stages build (given as
    "{}" here); the memo stands in for any desk's slice of it."""
    prompts, compiled = load_prompts(config.protocol)
    known = {"universe": ", ".join(scenario.tickers), "constraints": constraints, "evidence": memo.text,
             "memo": memo.text, "round": 1, "schema": "{}"}
    problems = []
    for stage, spec in prompts.stages.items():
        variables = {k: known.get(k, stage if k == "role" else "{}") for k in spec.variables}
        try:
            compiled[stage].render(**variables)
        except Exception as exc:  # any template failure is a config problem to report with the others
            problems.append(f"config {config.name}: {config.protocol} stage {stage} prompt: "
                            f"{_failure(exc, compiled[stage].where)}")
    return problems


def prompt_problems(configs: list[DebateConfig], scenario: Scenario, memo: Memo) -> list[str]:
    """Render every template each config can use once, on a real memo: a sandbox violation, a runaway template or a
    prompt over the size limit (madbench.data.templates) fails here, before any run, not in every run."""
    problems: list[str] = []
    for config in configs:
        constraints = constraints_text(config.effective_constraints(scenario.constraints, f"config {config.name}: constraints"))
        check = paper_prompt_problems if protocol_of(config).prompts == "profiles" else staged_prompt_problems
        problems += [p for p in check(config, scenario, memo, constraints) if p not in problems]
    return problems


def _unwritable(d: Path) -> Path | None:
    """The first of ``d``, its entries and theirs (the cache's databases; a batch's lock, traces and runs) that this
    user cannot write, or cannot list when it is a folder."""
    todo, depth = [d], {d: 0}
    while todo:
        p = todo.pop(0)
        folder = p.is_dir()
        if blocks_writing(p, os.W_OK | (os.R_OK | os.X_OK if folder else 0)):
            return p
        if folder and depth[p] < 2 and not p.is_symlink():
            for child in sorted(p.iterdir()):
                depth[child] = depth[p] + 1
                todo.append(child)
    return None


def writable_problems(dirs: dict[str, Path]) -> list[str]:
    """Each directory and what it already holds, or the nearest folder above it that exists, must be writable
    (nothing is created here): a read-only cache would otherwise kill every runner actor as it opens it."""
    problems = []
    for what, d in dirs.items():
        existing = next(p for p in [d, *d.resolve().parents] if p.exists())
        if not existing.is_dir():
            problems.append(f"{d}: the {what} directory's path runs through a file ({existing})")
            continue
        if d.exists():
            blocked = _unwritable(d)
        else:  # created later, in the nearest folder that exists
            blocked = None if os.access(existing, os.W_OK | os.X_OK) else existing
        if blocked is not None:
            problems.append(f"the {what} directory {d} is read-only ({blocked} is not writable by this user): make it "
                            f"writable (chmod -R u+w {d}) or choose another directory")
    return problems


def price_problems(configs: list[DebateConfig], cap_usd: float | None) -> list[str]:
    """Under a ``max_cost_usd``, every model a run can reach must have a known price: a call of one without (litellm's
    cost map has no entry, or lists a hosted model at $0, and its spec declares no ``price``) would count $0 against
    the cap, which then holds nothing. Rule-based and local models cost 0, known."""
    if cap_usd is None:
        return []
    where: dict[str, set[str]] = {}
    hosted: set[str] = set()
    providers = build_providers()
    for config in configs:
        for _, _, spec in reachable_models(config):
            if spec_cost(providers.for_model(spec.model), spec, 1000, 1000) is None:
                where.setdefault(spec.model, set()).add(config.name)
                if not spec.api_base:
                    hosted.add(spec.model)
    return [f"{model}: unknown price (litellm's cost map has none, or lists it at $0){_unlisted(model, hosted)}, so "
            f"max_cost_usd (${cap_usd:g}) cannot be enforced for its calls (config {', '.join(sorted(names))}): correct "
            "a mistyped name, or declare its price on its tier in the routing profile (configs/routing/NAME.yaml: "
            "price: {input_usd_per_mtok: …, output_usd_per_mtok: …}) or in the batch's `model` spec, or remove "
            "max_cost_usd"
            for model, names in sorted(where.items())]


def _unlisted(model: str, hosted: set[str]) -> str:
    """For a hosted model litellm does not list at all (a typo, most often): that, and the nearest names it lists."""
    if model not in hosted or listed(model):
        return ""
    near = nearest_models(model)
    return f"; litellm does not list this model ({'nearest known: ' + ', '.join(near) if near else 'no similar name'})"


def blind_residue_problems(configs: list[DebateConfig], scenarios: list[Scenario], memos: dict[str, Memo],
                           pack: Pack) -> list[str]:
    """The residue pass of `madbench leakage audit` on every blind memo a blind config will send, before any call: a
    name, year, month, exact macro level, lower-case term or exact amount left in one would leak into every request of
    its runs. ``macro: exact``, asked for explicitly, is not a problem here (the run records it)."""
    options = list({c.blind.model_dump_json(): c.blind for c in configs if c.blind.enabled}.values())
    if not options:
        return []
    companies = pack_companies(pack.universe)
    problems = []
    for o in options:
        for s in scenarios:
            if s.id not in memos:
                continue
            r = memo_residue(blind_memo(memos[s.id], s, companies, o).memo)
            left = {k: n for k, n in r.counts.items() if n and not (k == "exact_level" and o.macro == "exact")}
            if left:
                problems.append(f"scenario {s.id}: its blind memo still holds {', '.join(f'{n} {k}' for k, n in left.items())} "
                                f"(e.g. {'; '.join(', '.join(v) for k, v in r.examples.items() if k in left)}); see "
                                "`madbench leakage audit`; add generic terms to `capitalised` of configs/blind_vocabulary.yaml, "
                                "redraw its derived words (python -m madbench.data.generic_words), or widen the masking rules")
    return problems


def preflight(runs: list[RunSpec], pack: Pack, where: str, cache_dir: Path | None, results_root: Path,
              cap_usd: float | None = None) -> list[str]:
    """Every problem found, as lines naming the file, config or scenario; empty when the batch can start
    (``cache_dir`` None: the cache is not on this machine, as through the Ray client, and is not checked;
    ``cap_usd``: the batch's ``max_cost_usd``, which every model it reaches must have a price to be held to)."""
    configs = list({r.config.name: r.config for r in runs}.values())
    scenarios = list({r.scenario.id: r.scenario for r in runs}.values())
    memos, problems = scenario_problems(scenarios, pack, where)
    problems += rule_model_problems(configs)
    problems += model_problems(configs)
    problems += price_problems(configs, cap_usd)
    problems += context_problems(configs, memos)
    problems += blind_residue_problems(configs, scenarios, memos, pack)
    if memos:  # the longest memo: a prompt over the size limit shows on it
        largest = max((s for s in scenarios if s.id in memos), key=lambda s: len(memos[s.id].text))
        problems += prompt_problems(configs, largest, memos[largest.id])
    problems += writable_problems(({} if cache_dir is None else {"LLM cache": Path(cache_dir)}) | {"results": Path(results_root)})
    return problems


#: Seconds the endpoint probe waits for an endpoint (name lookup, connection and answer together): a dead endpoint is
#: named at once instead of after the gateway's minutes of retries and outage patience.
PROBE_TIMEOUT_S = 5.0


def endpoint_name(api_base: str) -> str:
    """``api_base`` as a message shows it: without a user part or a query, where a key could sit."""
    parts = urlsplit(api_base)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


def endpoint_problem(api_base: str, timeout_s: float = PROBE_TIMEOUT_S, openai_route: bool = True) -> str | None:
    """Why nothing OpenAI-compatible answers at ``api_base``: its host name does not resolve, the connection is
    refused or times out, or ``GET {api_base}/models`` is a 404 (a wrong path: every call would be one too). One
    unbilled request, sent without a key; any other answer (200, 401, 500) shows an endpoint there. None when it
    answers. The 404 is a problem only on OpenAI's route (``openai_route``), where ``/models`` is part of the API the
    calls use: Anthropic's, Azure's or Gemini's paths lie elsewhere, so their 404 there says nothing."""
    parts = urlsplit(api_base)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    name = endpoint_name(api_base)
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return f"{name}: its host name {host} does not resolve (DNS)"
    try:
        status = httpx.get(f"{api_base.rstrip('/')}/models", timeout=timeout_s).status_code
    except httpx.TimeoutException:
        return f"{name}: no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        refused = isinstance(exc, httpx.ConnectError) and "refused" in str(exc).lower()
        return f"{name}: " + ("the connection is refused (nothing listens there)" if refused else f"cannot connect ({exc})")
    if status == 404 and openai_route:
        return f"{name}: answers 404 Not Found at {name.rstrip('/')}/models, so its chat completions path is not there " \
               "either (a missing or extra /v1?)"
    return None


def endpoint_problems(endpoints: dict[str, set[str]], timeout_s: float = PROBE_TIMEOUT_S,
                      models: dict[str, set[str]] | None = None) -> list[str]:
    """``endpoint_problem`` of each api_base (to the users named beside it, e.g. models and configs), probed side by
    side in daemon threads: a name lookup that hangs is given up after ``timeout_s`` too. ``models``: the models
    reached at each api_base (default: the users' names, when they are model names), which say whether its 404 counts
    (``openai_route``)."""
    found: dict[str, str | None] = {}
    models = endpoints if models is None else models

    def probe(base: str) -> None:
        found[base] = endpoint_problem(base, timeout_s, all(openai_route(m) for m in models.get(base, ())))

    threads = [threading.Thread(target=probe, args=(b,), daemon=True) for b in endpoints]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 1)
    problems = []
    for base, users in sorted(endpoints.items()):
        problem = found.get(base, f"{endpoint_name(base)}: no answer within {timeout_s:g} s (name lookup)")
        if problem:
            problems.append(f"{problem} ({'; '.join(sorted(users))}): every call to it would fail; start the server "
                            "there, or correct api_base")
    return problems


def require_endpoint(api_base: str | None, models: set[str], flag: str = "--api-base") -> None:
    """A command that calls ``models`` at ``api_base`` given on its command line: an InputError naming ``flag`` when
    nothing answers there (``endpoint_problems``), before its first call rather than after minutes of retries."""
    dead = endpoint_problems({api_base: models}) if api_base else []
    if dead:
        raise InputError(flag, dead[0], f"start the server, or correct {flag}")


def openai_route(model: str) -> bool:
    """Whether litellm sends ``model``'s calls on OpenAI's chat-completions route (``openai/…``, or no provider)."""
    return "/" not in model or model.split("/", 1)[0] in ("openai", "hosted_vllm", "openai_like")


def spec_problems(spec: ModelSpec) -> list[str]:
    """What makes every call to ``spec`` fail, as a batch's preflight names it (a provider litellm cannot route, a
    missing key, a model name it does not list), for the commands that call one model outside a batch; a problem
    only a call would meet (a missing key, a name litellm does not list) is a ``SendOnly``, which a dry run reports
    and goes on past."""
    return list(build_providers().for_model(spec.model).preflight(spec, None, None))


def config_endpoints(configs: Iterable[DebateConfig]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Each api_base a run of ``configs`` can reach (fallbacks too), with the models and configs that reach it, and
    with the models alone (``endpoint_problems``' two mappings)."""
    users: dict[str, set[str]] = {}
    models: dict[str, set[str]] = {}
    for config in configs:
        for _, _, spec in reachable_models(config):
            if spec.api_base and not spec.model.startswith("rules/"):
                users.setdefault(spec.api_base, set()).add(f"{spec.model}, config {config.name}")
                models.setdefault(spec.api_base, set()).add(spec.model)
    return users, models


def preflight_error(problems: list[str], where: str) -> InputError:
    """One InputError that lists every problem (the CLI prints it and exits 2): one line when there is one."""
    if len(problems) == 1:
        return InputError(where, f"found before any model call: {problems[0]}",
                          "nothing was started; fix it and run the same command again")
    listing = "\n  - ".join(problems)
    return InputError(where, f"{len(problems)} problem(s) found before any model call:{os.linesep}  - {listing}",
                      "nothing was started; fix them and run the same command again")
