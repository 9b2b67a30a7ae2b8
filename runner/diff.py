"""`madbench diff A B`: why two runs, or two batches, differ.

Each side is a batch's results directory, a single run of one (``RESULTS:RUN_ID``), or a run directory of
`madbench debate --out`. The comparison names what differs in the config fields, in the prompt texts (their hashes,
recorded in each run's ``run_start``) and the first request the two runs sent differently (its key, its messages'
hash, its sampling parameters), in the data hashes, the models the providers served, the package versions and the
code revision of the manifests' provenance, and which paired runs' outcomes changed (status, weights, return, ρ̄).
Runs of two batches are paired by scenario, config name and replicate.

The prompts themselves are not in a trace (only their hashes and each request's messages hash), so a differing prompt
is shown as the unified diff of the two runs' recorded request metadata, not of the rendered text.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from madbench.data.errors import InputError
from madbench.data.names import check_name
from madbench.debate.events import Event, LLMCall, RunStart, last_attempt
from madbench.results import BatchDirs, DebateDirs, RunResult, read_committed_history, read_result
from madbench.results.layout import MANIFEST
from madbench.results.provenance import Provenance
from madbench.results.records import read_debate_manifest
from madbench.runner.committed import manifest_of, read_committed

#: The outcome fields compared per paired run.
OUTCOME = ("status", "weights", "cash", "total_return_pct", "rho_bar")


@dataclass
class Run:
    run_id: str
    result: RunResult
    events: list[Event]

    @property
    def start(self) -> RunStart:
        return next(e for e in self.events if isinstance(e, RunStart))

    @property
    def calls(self) -> list[LLMCall]:
        return [e for e in self.events if isinstance(e, LLMCall)]

    @property
    def pair_key(self) -> tuple[str, str, int]:
        return (self.result.scenario_id, self.result.config_name, self.result.sample_index)


@dataclass
class Side:
    where: str
    kind: str  # batch | run
    provenance: Provenance | None
    spec: dict[str, Any] | None
    runs: list[Run]


def load_side(where: str | Path) -> Side:
    text = str(where)
    path = Path(text)
    if (path / DebateDirs.TRACE).is_file():  # a run directory of `madbench debate --out`
        run_manifest = path / MANIFEST
        provenance = read_debate_manifest(run_manifest).provenance if run_manifest.is_file() else None
        return Side(text, "run", provenance, None, [_run(path.name, path / DebateDirs.RESULT, path / DebateDirs.TRACE)])
    root, _, run_id = text.rpartition(":") if not path.exists() and ":" in text else (text, "", "")
    if run_id:
        check_name(run_id, where, "run id")  # a run id names a file inside RESULTS/runs/: never a path
    dirs = BatchDirs(root)
    if not dirs.manifest.is_file() and not dirs.manifest.is_symlink():
        raise InputError(where, "neither a batch results directory (manifest.json) nor a run directory (trace.jsonl)",
                         "give a batch's results directory, RESULTS:RUN_ID, or a run directory of `madbench debate --out`")
    manifest = manifest_of(read_committed(root, "diff"))
    if run_id:
        if not dirs.result_path(run_id).is_file():
            raise InputError(where, f"no committed run {run_id} in {root}", "take a run id from its runs.parquet")
        runs = [_run(run_id, dirs.result_path(run_id), dirs.trace_path(run_id))]
        return Side(text, "run", manifest.provenance, manifest.spec, runs)
    runs = [_run(p.stem, p, dirs.trace_path(p.stem)) for p in dirs.result_files()]
    return Side(text, "batch", manifest.provenance, manifest.spec, runs)


def _run(run_id: str, result: Path, trace: Path) -> Run:
    if not result.is_file():
        raise InputError(result, "not found", "give a committed run (its result and its trace)")
    return Run(run_id, read_result(result, run_id), last_attempt(list[Event](read_committed_history(trace))))


def _nested(value: Any) -> bool:
    """A value a diff goes into: a dict or a list holding dicts or lists, with entries to compare."""
    return (isinstance(value, dict) and bool(value)) or (
        isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value))


def field_diff(a: Any, b: Any, prefix: str = "") -> list[dict[str, Any]]:
    """Where ``a`` and ``b`` differ, as {field: dotted path, a, b}: it goes into what both sides hold in the same shape
    (two dicts, two lists of structures) and names a field absent on one side as None; anything else is one entry
    with both values whole (``interventions: [] -> [{...}]``, never the entries of a side that has none). At the top
(no ``prefix``: a whole section) a side that is None has each of the other side's fields as None."""
    if a == b:
        return []
    if not prefix and (a is None or b is None):  # a section one side has nothing of (no provenance): its fields each
        a, b = (a if a is not None else {}), (b if b is not None else {})
    if isinstance(a, dict) and isinstance(b, dict) and ((a and b) or not prefix):
        return [d for key in sorted(set(a) | set(b), key=str)
                for d in field_diff(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else str(key))]
    if isinstance(a, list) and isinstance(b, list) and _nested(a) and _nested(b):
        return [d for i in range(max(len(a), len(b)))
                for d in field_diff(a[i] if i < len(a) else None, b[i] if i < len(b) else None, f"{prefix}[{i}]")]
    return [{"field": prefix, "a": a, "b": b}]


def turns(calls: list[LLMCall]) -> dict[tuple[str, str, int, str, int], LLMCall]:
    """Each call by its turn (agent, phase, round, label) and its occurrence there (a feedback retry asks again):
    the agents of a phase answer concurrently, so the trace's order of two runs' calls is not their pairing."""
    seen: Counter[tuple[str, str, int, str]] = Counter()
    out = {}
    for c in calls:
        turn = (c.agent, c.phase, c.round, c.label)
        out[(*turn, seen[turn])] = c
        seen[turn] += 1
    return out


def first_request(a: Run, b: Run) -> dict[str, Any] | None:
    """The first call (in a's trace order) the two runs sent differently, paired with b's call of the same turn: its
    place, what differs, and a unified diff of the two calls' recorded request metadata."""
    by_a, by_b = turns(a.calls), turns(b.calls)
    for turn, x in by_a.items():
        y = by_b.get(turn)
        if y is None:
            return {"seq": x.seq, "call": f"{x.agent} {x.label}, round {x.round}: only in a",
                    "messages": "n/a", "differs": [{"field": "calls", "a": len(a.calls), "b": len(b.calls)}],
                    "unified_diff": ""}
        if x.key == y.key:
            continue
        fields = ("agent", "phase", "round", "label", "model_requested", "messages_hash", "request_params")
        left, right = ({f: getattr(c, f) for f in fields} for c in (x, y))
        before, after = (json.dumps(side, indent=1, sort_keys=True, default=str).splitlines() for side in (left, right))
        return {"seq": x.seq, "call": f"{x.agent} {x.label}, round {x.round}",
                "messages": "identical" if x.messages_hash == y.messages_hash else "differ",
                "differs": field_diff(left, right),
                "unified_diff": "\n".join(difflib.unified_diff(before, after, f"a/{a.run_id}#{x.seq}",
                                                               f"b/{b.run_id}#{y.seq}", lineterm=""))}
    extra = next((y for turn, y in by_b.items() if turn not in by_a), None)
    if extra is not None:
        return {"seq": extra.seq, "call": f"{extra.agent} {extra.label}, round {extra.round}: only in b",
                "messages": "n/a", "differs": [{"field": "calls", "a": len(a.calls), "b": len(b.calls)}],
                "unified_diff": ""}
    return None


def outcome(run: Run) -> dict[str, Any]:
    r = run.result
    return {"status": r.status, "weights": json.dumps(r.weights, sort_keys=True), "cash": r.cash,
            "total_return_pct": (r.metrics or {}).get("total_return_pct"), "rho_bar": r.rho_bar}


def served(side: Side) -> dict[str, list[str]]:
    """Each requested model and the names the provider reported serving it as."""
    out: dict[str, set[str]] = {}
    for run in side.runs:
        for c in run.calls:
            out.setdefault(c.model_requested, set()).add(c.model_served or "(not reported)")
    return {k: sorted(v) for k, v in sorted(out.items())}


def diff(a: str | Path, b: str | Path) -> dict[str, Any]:
    sa, sb = load_side(a), load_side(b)
    if sa.kind != sb.kind:
        raise InputError(b, f"is a {sb.kind}, {a} a {sa.kind}", "compare two runs or two batches")
    pa, pb = sa.provenance, sb.provenance
    out: dict[str, Any] = {"a": str(a), "b": str(b), "kind": sa.kind}
    if sa.kind == "run":
        ra, rb = sa.runs[0], sb.runs[0]
        out["config"] = field_diff(ra.start.config, rb.start.config)
        out["scenario"] = field_diff({"id": ra.result.scenario_id}, {"id": rb.result.scenario_id})
        out["prompts"] = field_diff(ra.start.prompt_hashes, rb.start.prompt_hashes)
        out["first_request"] = first_request(ra, rb)
        pairs = [(ra, rb)]
    else:
        ignore = {"cache_dir", "results_dir"}
        out["config"] = field_diff({k: v for k, v in (sa.spec or {}).items() if k not in ignore},
                                   {k: v for k, v in (sb.spec or {}).items() if k not in ignore})
        ca = {r.result.config_name: r.start.config for r in sa.runs}
        cb = {r.result.config_name: r.start.config for r in sb.runs}
        out["config"] += [d for name in sorted(set(ca) & set(cb)) for d in field_diff(ca[name], cb[name], f"configs.{name}")]
        by_b = {r.pair_key: r for r in sb.runs}
        pairs = [(r, by_b[r.pair_key]) for r in sa.runs if r.pair_key in by_b]
        out["unpaired"] = {"a": len(sa.runs) - len(pairs), "b": len(sb.runs) - len(pairs)}
        first = next(((x, y) for x, y in pairs if first_request(x, y) is not None), None)
        out["prompts"] = [] if first is None else field_diff(first[0].start.prompt_hashes, first[1].start.prompt_hashes)
        request = None if first is None else first_request(*first)
        out["first_request"] = None if first is None or request is None else \
            request | {"runs": [first[0].run_id, first[1].run_id]}
    #: Sides whose manifest records no provenance (written before format 3): their data, packages and code are unknown.
    out["no_provenance"] = [side for side, p in (("a", pa), ("b", pb)) if p is None]
    out["data"] = field_diff(pa.data if pa else None, pb.data if pb else None)
    out["models_served"] = field_diff(served(sa), served(sb))
    out["packages"] = field_diff(({"python": pa.python} | pa.packages | pa.price_table) if pa else None,
                                 ({"python": pb.python} | pb.packages | pb.price_table) if pb else None)
    out["code"] = field_diff(pa.git.model_dump() if pa else None, pb.git.model_dump() if pb else None)
    out["outcomes"] = [{"a": x.run_id, "b": y.run_id, "scenario": x.result.scenario_id, "config": x.result.config_name,
                        "replicate": x.result.sample_index, "changed": field_diff(outcome(x), outcome(y))}
                       for x, y in pairs if outcome(x) != outcome(y)]
    return out


def lines(d: dict[str, Any]) -> list[str]:
    """The diff as printed: one section per kind of difference, 'same' where there is none."""
    out = [f"a: {d['a']}", f"b: {d['b']}"]
    if d["no_provenance"]:
        out.append(f"no provenance recorded in {' and '.join(d['no_provenance'])} (written before results format 3): "
                   "data, packages and code compare as unknown")
    for section in ("config", "scenario", "prompts", "data", "models_served", "packages", "code"):
        if section not in d:
            continue
        items = d[section]
        out.append(f"{section}: {'same' if not items else ''}".rstrip())
        out += [f"  {i['field']}: {i['a']!r} -> {i['b']!r}" for i in items]
    fr = d.get("first_request")
    if fr is None:
        out.append("requests: every request the same")
    else:
        runs = f" (runs {fr['runs'][0]} and {fr['runs'][1]})" if "runs" in fr else ""
        out.append(f"first differing request: call {fr['seq']}, {fr['call']}{runs}; messages {fr['messages']}")
        out += [f"  {i['field']}: {i['a']!r} -> {i['b']!r}" for i in fr["differs"]]
        out += ["  " + line for line in fr["unified_diff"].splitlines()]
    if "unpaired" in d and any(d["unpaired"].values()):
        out.append(f"unpaired runs: {d['unpaired']['a']} only in a, {d['unpaired']['b']} only in b")
    out.append(f"outcomes changed: {len(d['outcomes'])} run(s)")
    for o in d["outcomes"]:
        out.append(f"  {o['a']} / {o['b']} ({o['config']} on {o['scenario']}, replicate {o['replicate']}): "
                   + "; ".join(f"{c['field']} {c['a']!r} -> {c['b']!r}" for c in o["changed"]))
    return out
