"""A batch file with its overrides (``RunOptions``), loaded and checked: what running it and estimating it start from.

Everything the batch names is read and checked here, before Ray starts and before any model call: its size, its
scenarios against the pack, and every problem the preflight finds (one InputError listing them all)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from madbench.data.errors import InputError
from madbench.data.market.pack import Pack, load_pack, resolve_evidence_dirs, resolve_pack_dir
from madbench.data.paths import MAX_DIR_NAME_BYTES
from madbench.data.templates import parse_yaml
from madbench.gateway import resolve_cache_dir
from madbench.gateway.providers.base import SendOnly
from madbench.gateway.routing_profiles import load_routing_profile
from madbench.results import check_results_dir
from madbench.runner.batch import (
    BatchSpec,
    RunSpec,
    _rel,
    check_max_runs,
    check_size,
    expand,
    load_batch,
    resolve_configs,
    resolve_scenarios,
    with_settings,
)
from madbench.runner.execute import HEAD_DIRS, ray_client
from madbench.runner.options import RunOptions
from madbench.runner.preflight import preflight, preflight_error, reachable_models
from madbench.runner.provider_batches import batch_problems
from madbench.runner.ray_address import check_address, split_address
from madbench.runner.store import BatchLayout


@dataclass(frozen=True)
class Launch:
    """A loaded batch: its spec (overrides applied), its runs, and where they read and write."""
    spec: BatchSpec
    runs: list[RunSpec]
    #: The batch's results directory (as built: relative to the working directory when its parts were).
    root: Path
    pack: Pack
    pack_dir: Path
    evidence: list[Path]
    cache_dir: Path
    #: What a dry run reports and goes on (``SendOnly`` problems: a missing key, a model litellm does not list).
    warnings: tuple[str, ...] = ()


def load(o: RunOptions) -> Launch:
    """Load a batch and everything it names, with the overrides of ``o``."""
    if o.address or os.environ.get("RAY_ADDRESS"):  # its syntax now; whether it answers, last (check_address)
        split_address(o.address or os.environ["RAY_ADDRESS"], "--address" if o.address else "RAY_ADDRESS")
    spec, base = load_batch(o.batch)
    spec, name = with_routing(spec, o)
    if o.provider_batch and spec.provider_batches is None:
        spec = spec.model_copy(update={"execution": "batch"})
    check_max_runs(o.max_runs)
    check_size(spec, o.batch, o.max_runs)  # from the spec's counts, before anything is built
    check_client_cache(o.address, o.cache_dir)
    if o.scenarios:  # the user's path, from the working directory, like --pack
        if not Path(o.scenarios).is_file():
            raise InputError("--scenarios", f"{o.scenarios} not found", "give a scenario YAML file (a relative path is "
                             "read from the current directory)")
        source = spec.scenarios.model_copy(update={"file": str(Path(o.scenarios).resolve()), "make": None})
        spec = spec.model_copy(update={"scenarios": source})
    pack_dir = resolve_pack_dir(o.pack or (str(_rel(base, spec.pack)) if spec.pack else None))
    evidence = resolve_evidence_dirs(o.evidence or [str(_rel(base, e)) for e in spec.evidence] or None)
    pack = load_pack(pack_dir, evidence)
    scenarios = resolve_scenarios(spec, base, pack, o.batch)  # checked against the pack by the preflight
    check_size(spec, o.batch, o.max_runs, len(scenarios))
    configs = resolve_configs(spec, base, o.batch)
    runs = expand(spec, scenarios, configs, o.batch, o.max_runs)
    cache_dir = resolve_cache_dir(o.cache_dir, _rel(base, spec.cache_dir) if spec.cache_dir else None)
    # results_dir is the user's path (from the working directory); the batch's own is relative to its file
    root = (Path(o.results_dir) if o.results_dir else _rel(base, spec.results_dir)) / name
    return Launch(spec, runs, root, pack, pack_dir, evidence, cache_dir)


def with_routing(spec: BatchSpec, o: RunOptions) -> tuple[BatchSpec, str]:
    """(``spec`` with ``model`` or ``routing`` and ``settings`` applied, the name of its results directory): a model
    or profile other than the batch's own gives other runs, kept apart under <batch>@<model or profile>."""
    if o.model and o.routing:
        raise InputError("--routing", "--model and --routing both replace every config's routing", "give one of them")
    name = spec.name
    if o.model:  # one model everywhere
        if "/" not in o.model:
            raise InputError("--model", f"{o.model!r} is not a model string", "write e.g. rules/auto or openai/gpt-4o-mini")
        spec = spec.model_copy(update={"model": o.model, "routing": spec.routing.model_copy(update={"profile": None})})
    if o.routing:
        load_routing_profile(o.routing, "--routing")
        spec = spec.model_copy(update={"model": None, "routing": spec.routing.model_copy(update={"profile": o.routing})})
    if o.model or o.routing:
        name = spec.name + "@" + "".join(c if c.isalnum() or c in "_.-" else "-" for c in o.model or o.routing or "")
        if len(name.encode()) > MAX_DIR_NAME_BYTES:  # the results directory's name: the file system's limit
            raise InputError("--model", f"the results directory's name {name[:40]}… would be {len(name.encode()):,} "
                             f"bytes, over the {MAX_DIR_NAME_BYTES} a file system allows",
                             "give a shorter model name, or put the model in a routing profile and use --routing")
    settings = parse_settings(o.settings)
    return (with_settings(spec, settings, "--set") if settings else spec), name


def parse_settings(items: list[str]) -> dict[str, dict]:
    """``--set TIER.FIELD[.FIELD]=VALUE`` items as {tier: {field: value}}; each value read as YAML (200 is a number)."""
    out: dict[str, dict] = {}
    for item in items:
        key, sep, value = item.partition("=")
        path = key.split(".")
        if not sep or len(path) < 2 or not all(path):
            raise InputError("--set", f"{item!r} is not TIER.FIELD=VALUE",
                             "write e.g. --set agents.limits.rpm=200 or --set strong.api_base=http://localhost:8000/v1")
        node = out.setdefault(path[0], {})
        for part in path[1:-1]:
            node = node.setdefault(part, {})
        try:
            node[path[-1]] = parse_yaml(value)
        except yaml.YAMLError:
            raise InputError("--set", f"{item!r}: the value is not YAML", "quote it or fix its syntax") from None
    return out


def check_client_cache(address: str | None, cache_cli: str | None) -> None:
    """Through the Ray client this process is off the cluster, and the cache actor opens the cache directory on the
    head (runner/cache_actor.py): a path resolved here by default (~/.cache/madbench/llm, or the batch's, relative
    to its file) or a relative one is a path nobody chose on the head. So it must be named, absolute."""
    if not ray_client(address):
        return
    given = cache_cli or os.environ.get("MADBENCH_CACHE_DIR")
    if given and Path(given).is_absolute():
        return
    problem = f"{given!r} is relative" if given else "no cache directory given"
    raise InputError("--cache-dir", f"{problem}: through the Ray client ({address or os.environ.get('RAY_ADDRESS')}) the "
                     "cache is opened on the head node, where a path resolved on this machine means nothing",
                     f"pass the head's cache directory, absolute: --cache-dir {HEAD_DIRS['--cache-dir']} (cluster.yaml's "
                     "MADBENCH_CACHE_DIR), or set MADBENCH_CACHE_DIR to it")


def load_checked(o: RunOptions, dry_run: bool = False) -> Launch:
    """``load``, then the preflight: every problem the batch would hit, named at once (an InputError). ``dry_run``:
    nothing will be sent, so what only sending meets (a missing key, an unknown model name) is a warning in
    ``Launch.warnings``, and the Ray address is not dialled."""
    b = load(o)
    check_results_dir(b.root)  # before anything reads what it holds
    # Runs committed ok are never run again, so their scenarios and configs need no check (a finished batch resumes
    # at once); failed ones may be retried, so they are checked with the pending ones.
    layout = BatchLayout(b.root)
    todo = [r for r in b.runs if (stored := layout.stored_result(r.run_id)) is None or stored.status != "ok"]
    # Through the Ray client the cache is on the head (check_client_cache): not this machine's to check.
    problems = preflight(todo, b.pack, o.batch, None if ray_client(o.address) else Path(b.cache_dir), b.root,
                         b.spec.max_cost_usd)
    warnings = [p for p in problems if isinstance(p, SendOnly)] if dry_run else []
    problems = [p for p in problems if p not in warnings]
    if not problems and b.spec.provider_batches is not None:
        configs = {r.config.name: r.config for r in b.runs}.values()
        problems = batch_problems([m for c in configs for _, _, m in reachable_models(c)])
    if problems:
        raise preflight_error(problems, o.batch)
    if not dry_run:
        check_address(o.address)
    return replace(b, warnings=tuple(warnings))
