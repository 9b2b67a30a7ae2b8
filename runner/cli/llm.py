"""`madbench llm ask`, `madbench cache …` and `madbench model …`: check a provider, inspect the cache, run the offline model.

`madbench cache verify` is the cache's tamper evidence. An entry's checksum catches accidents, but whoever edits
an answer can recompute it; the traces that used the cache cannot be edited that way (they are elsewhere, and
hash-chained). Every ``llm_call`` event records ``answer_sha256``, so each is looked up under its cache key and
the hash of what the cache holds now compared: a difference is an entry edited or replaced after the run.

Per run and cache key, the answer checked is the last one the run vouched for (``madbench.debate.events.vouches``): a fresh
answer from the provider, or the cache's answer the first time the run used that key. Its other ``llm_call`` events
for the key are superseded, not checked: an answer a resumed run was served from an edited cache (it differs from the
one the run recorded before; the run refused it and failed), and an earlier answer replaced by a later fresh one (the
call asked again after ``--drop``). So the repair it advises ends with a clean verify: ``cache verify --drop`` deletes
the edited entry, ``madbench run ... --retry-failed`` asks those calls again, and ``cache verify`` exits 0.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from madbench.data.errors import InputError, format_validation_error
from madbench.debate.events import LLMCall, vouches
from madbench.debate.trace import read_trace
from madbench.gateway import (
    GatewayFailure,
    LLMRequest,
    Message,
    ResponseCache,
    resolve_cache_dir,
)
from madbench.gateway.cache import answer_sha256
from madbench.gateway.errors import OutputInvalid
from madbench.gateway.local_model import LocalServer
from madbench.results import BatchDirs, read_manifest, run_files
from madbench.results.layout import run_id_of
from madbench.results.traces import check_attempts
from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import CACHE_DIR_HELP, add_model_deployment, called_spec, model_deployments, number
from madbench.runner.preflight import require_endpoint, spec_problems
from madbench.runner.wiring import build_gateway

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
LOCAL_NAME_HELP = "name of the embedded model (default gemma3-270m)"


def parse_duration(text: str, where: str) -> float:
    """'30d' -> seconds; an InputError naming ``where`` for anything else."""
    m = DURATION.match(text.strip())
    if not m:
        raise InputError(where, f"cannot read duration {text!r}", "write a number and a unit, e.g. 30d, 12h, 90m or 3600s")
    return float(m.group(1)) * UNITS[m.group(2)]


def register(sub) -> None:
    p = command_parser(sub, "llm")
    llm = p.add_subparsers(dest="llm_cmd", required=True, metavar="ACTION", help="what to send")
    p = llm.add_parser("ask", help="one request through the full gateway (limiter, cache, retries, validation)")
    p.add_argument("--model", required=True, help="litellm model string (openai/gpt-4o-mini, ollama/llama3, …) or local/gemma3-270m")
    add_model_deployment(p, "--model", ("--api-base", "--api-key-env", "--rpm", "--tpm"))
    p.add_argument("--prompt", required=True, help="the user message")
    p.add_argument("--system", help="a system message")
    p.add_argument("--schema", help="FILE.json: a JSON schema the answer must satisfy (sent for constrained decoding)")
    p.add_argument("--temperature", type=number(ge=0, le=2), default=0.0, help="sampling temperature (default 0)")
    p.add_argument("--max-tokens", type=number(int, ge=1, le=1_000_000), default=None, help="most tokens in the answer (default: the provider's)")
    p.add_argument("--sample-index", type=number(int, ge=0), default=0, help="replicate number (distinct cached samples)")
    p.add_argument("--timeout", type=number(gt=0, le=3600), default=120.0, help="seconds per attempt (default 120)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the response cache")
    p.add_argument("--cache-dir", help="cache directory (else $MADBENCH_CACHE_DIR, else $MADBENCH_HOME/llm: ~/.cache/madbench/llm)")
    p.add_argument("--json", action="store_true", help="print the response and its metadata as one JSON object")
    p.set_defaults(func=cmd_llm_ask)

    p = command_parser(sub, "cache")
    cache = p.add_subparsers(dest="cache_cmd", required=True, metavar="ACTION", help="what to do with the cache")
    p = cache.add_parser("stats", help="entries, size, and hits/misses by model")
    p.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    p.add_argument("--json", action="store_true", help="print the statistics as one JSON object")
    p.set_defaults(func=cmd_cache_stats)
    p = cache.add_parser("prune", help="remove entries older than a given age")
    p.add_argument("--older-than", required=True, help="age such as 30d, 12h, 90m")
    p.add_argument("--model", help="only entries of this model")
    p.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    p.set_defaults(func=cmd_cache_prune)
    p = cache.add_parser("verify", help="check the cache's answers against the hashes recorded by the runs that used them")
    p.add_argument("results_dirs", nargs="+", metavar="RESULTS_DIR",
                   help="a batch's results directory, or the --out directory of `madbench debate`")
    p.add_argument("--cache-dir", help="LLM response cache (else $MADBENCH_CACHE_DIR, else the batch's cache_dir from its "
                                       "manifest, else $MADBENCH_HOME/llm)")
    p.add_argument("--drop", action="store_true", help="delete the mismatched and corrupt entries, so those calls are asked again")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary as one JSON object")
    p.set_defaults(func=cmd_cache_verify)

    p = command_parser(sub, "model")
    model = p.add_subparsers(dest="model_cmd", required=True, metavar="ACTION", help="what to do with the model's server")
    p = model.add_parser("serve", help="start the local model server and keep it up until Ctrl-C")
    p.add_argument("--name", default="gemma3-270m", help=LOCAL_NAME_HELP)
    p.add_argument("--threads", type=number(int, ge=1, le=1024), default=None, help="llama.cpp threads (default: 2, or 1 on a one-core machine)")
    p.add_argument("--reuse-prefix", action="store_true",
                   help="let llama.cpp reuse cached prompt prefixes (faster; output bytes then depend on earlier requests)")
    p.set_defaults(func=cmd_model_serve)
    for name, func, text in (("status", cmd_model_status, "is the server up, and where"),
                             ("stop", cmd_model_stop, "stop the server")):
        p = model.add_parser(name, help=text)
        p.add_argument("--name", default="gemma3-270m", help=LOCAL_NAME_HELP)
        p.set_defaults(func=func)


def _read_schema(path: str) -> dict:
    import jsonschema
    p = Path(path)
    if not p.is_file():
        raise InputError(path, "schema file not found", "give a JSON schema file")
    try:
        schema = json.loads(p.read_text())
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"malformed JSON at line {exc.lineno}: {exc.msg}", "fix the JSON") from None
    except jsonschema.SchemaError as exc:
        raise InputError(path, f"not a valid JSON schema: {exc.message}", "fix the schema") from None
    return schema


def schema_validator(schema: dict | None):
    """The gateway's answer check for ``schema``: the parsed JSON, or OutputInvalid (retried); None: any text."""
    import jsonschema
    def validate(content: str, spec):
        if schema is None:
            return content
        try:
            value = json.loads(content, strict=False)
        except json.JSONDecodeError as exc:
            raise OutputInvalid(f"the answer is not valid JSON ({exc.msg})") from None
        errors = sorted(jsonschema.validators.validator_for(schema)(schema).iter_errors(value), key=lambda e: list(e.path))
        if errors:
            raise OutputInvalid("; ".join(f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors[:5]))
        return value
    return validate


def cmd_llm_ask(args) -> int:
    schema = _read_schema(args.schema) if args.schema else None
    if not args.prompt.strip():
        raise InputError("--prompt", "is empty", "give the text to send")
    if "/" not in args.model and not args.routing:  # with --routing, a tier's name
        raise InputError("--model", f"{args.model!r} is not a model string", "write PROVIDER/MODEL, e.g. openai/gpt-4o-mini")
    model = model_deployments(args, [args.model])[0]
    spec = called_spec(model, retry=model.spec.retry.model_dump() | {"timeout_s": args.timeout})
    problems = spec_problems(spec)  # an unknown provider, a missing key: as `madbench run`'s preflight says them
    if problems:
        raise InputError("--model", "; ".join(problems), "give a model that can be called")
    require_endpoint(spec.api_base, {spec.model}, model.api_base_from)
    messages = ([Message(role="system", content=args.system)] if args.system else []) + [Message(role="user", content=args.prompt)]
    request = LLMRequest(model=spec.model, messages=messages, temperature=args.temperature, max_tokens=args.max_tokens,
                         response_schema=schema, sample_index=args.sample_index)
    cache = None if args.no_cache else ResponseCache(resolve_cache_dir(args.cache_dir))
    gateway = build_gateway(cache=cache)
    try:
        c = asyncio.run(gateway.complete(request, spec, schema_validator(schema)))
    except GatewayFailure as exc:
        print(f"madbench: request failed: {exc.reason}", file=sys.stderr)
        for a in exc.attempts:
            print(f"  attempt: {a['model']} {a['kind']}: {a['reason']}", file=sys.stderr)
        return 1
    finally:
        if cache:
            cache.close()
    meta: dict[str, Any] = {"model_requested": c.model_requested, "model_used": c.model_used, "is_llm": c.is_llm, "cached": c.cached,
            "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens, "cost_usd": c.cost_usd,
            "latency_s": round(c.latency_s, 4), "overhead_ms": round(c.overhead_s * 1000, 3),
            "retries": [{"kind": a.kind, "reason": a.reason, "wait_s": round(a.wait_s, 3)} for a in c.attempts if a.kind != "ok"],
            "validation_retries": c.validation_retries, "key": c.key}
    if args.json:
        print(json.dumps({"content": c.content, **meta}, indent=1))
    else:
        print(c.content)
        cost = "unknown (model not in litellm's cost map)" if c.cost_usd is None else f"${c.cost_usd:.6f}"
        print(f"\n-- {c.model_used} | cached={c.cached} | tokens {c.prompt_tokens}+{c.completion_tokens} | "
              f"{c.latency_s:.3f} s | cost {cost} | retries {len(meta['retries'])}", file=sys.stderr)
        for r in meta["retries"]:
            print(f"   retry: {r['kind']}: {r['reason']} (waited {r['wait_s']} s)", file=sys.stderr)
    return 0


def cmd_cache_stats(args) -> int:
    with ResponseCache(resolve_cache_dir(args.cache_dir), read_only=True) as cache:  # also a cache this user cannot write
        stats = cache.stats()
    if args.json:
        print(json.dumps(stats, indent=1))
        return 0
    print(f"cache {stats['directory']}: {stats['entries']} entries, {stats['size_bytes'] / 1e6:.2f} MB, "
          f"{stats['corrupt_dropped']} corrupt entries dropped")
    print("| model | entries | hits | misses |\n|---|---|---|---|")
    for model, row in sorted(stats["by_model"].items()):
        print(f"| {model} | {row['entries']} | {row['hits']} | {row['misses']} |")
    return 0


def cmd_cache_prune(args) -> int:
    age = parse_duration(args.older_than, "--older-than")
    with ResponseCache(resolve_cache_dir(args.cache_dir)) as cache:
        removed = cache.prune(age, args.model)
    print(f"removed {removed} entries older than {args.older_than}")
    return 0


@dataclass
class _Call:
    """One ``llm_call`` event to check: which run and call, under which key, and the answer hash it recorded."""

    run: str
    seq: int
    where: str
    key: str
    sha256: str
    cached: bool
    #: True when the trace predates ``answer_sha256`` and the hash is that of its traced response.
    from_response: bool

    def line(self, problem: str) -> str:
        return f"run {self.run}: call {self.seq} ({self.where}), key {self.key}: {problem}"


@dataclass
class _Verdict:
    calls: int = 0
    ok: int = 0
    missing: int = 0
    unrecorded: int = 0
    superseded: int = 0
    dropped: int = 0
    runs: set[str] = field(default_factory=set)
    caches: set[str] = field(default_factory=set)
    mismatched: list[dict] = field(default_factory=list)
    corrupt: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _run_traces(root: Path) -> list[tuple[str, Path]]:
    """(run id, trace) of every run under ``root``: a batch's ``traces/<run>.jsonl``, a debate's ``<run>/trace.jsonl``."""
    if not root.is_dir():
        raise InputError(root, "not a directory", "give a batch's results directory or the --out directory of `madbench debate`")
    found = [(run_id_of(commit), trace) for trace, commit in run_files(root)]
    if not found:
        raise InputError(root, "holds no run traces (traces/*.jsonl or <run>/trace.jsonl)",
                         "give a batch's results directory or the --out directory of `madbench debate`")
    return found


def _recorded_calls(run: str, trace: Path, verdict: _Verdict) -> list[_Call]:
    """The run's ``llm_call`` events to check: those that recorded the answer the run last vouched for under their key
    (see the module's docstring); an event of an older trace has its response's hash."""
    readout = read_trace(trace)
    check_attempts(readout.events, trace)
    verdict.notes += readout.problems  # a torn tail or a broken chain: the whole events before it are still checked
    calls = []
    for record in readout.events:
        if record.get("event") != "llm_call":
            continue
        try:
            e = LLMCall.model_validate(record)
        except ValidationError as exc:
            raise InputError(trace, f"event {record.get('seq')} is not an llm_call madbench reads: {format_validation_error(exc)}",
                             "restore the trace from the run's own copy") from None
        sha, from_response = (e.answer_sha256, False) if e.answer_sha256 else \
            (None if e.response is None else answer_sha256(e.response), True)
        verdict.calls += 1
        if sha is None:
            verdict.unrecorded += 1
            continue
        calls.append(_Call(run, e.seq, f"{e.agent} {e.label}, round {e.round}", e.key, sha, e.cached, from_response))
    vouched: dict[str, str] = {}  # key -> the last answer the run vouched for
    for call in calls:
        if vouches({"cached": call.cached, "key": call.key}, vouched.keys()):
            vouched[call.key] = call.sha256
    checked = [call for call in calls if call.sha256 == vouched[call.key]]
    verdict.superseded += len(calls) - len(checked)
    return checked


def _check_calls(cache: ResponseCache, calls: list[_Call], verdict: _Verdict) -> None:
    """Compare each call's recorded hash with the cache's entry; one finding per run, key and recorded answer."""
    states, seen = {}, set()
    for call in calls:
        if call.key not in states:
            states[call.key] = cache.inspect(call.key)
        state = states[call.key]
        if state.status == "missing":
            verdict.missing += 1
            continue
        if state.status == "present" and state.answer_sha256 == call.sha256:
            verdict.ok += 1
            continue
        if (call.run, call.key, call.sha256) in seen:
            continue
        seen.add((call.run, call.key, call.sha256))
        finding = {"run": call.run, "seq": call.seq, "call": call.where, "key": call.key, "recorded_sha256": call.sha256,
                   "cached": call.cached, "from_response": call.from_response, "cache_dir": str(cache.directory)}
        if state.status == "corrupt":
            verdict.corrupt.append({**finding, "reason": state.reason,
                                    "line": call.line(f"the cache entry is corrupt ({state.reason})")})
            continue
        used = "was served from the cache" if call.cached else "received from the provider"
        source = " (hash of its traced response: the trace predates answer_sha256)" if call.from_response else ""
        assert state.answer_sha256 is not None  # neither missing nor corrupt: present, with its hash
        verdict.mismatched.append({**finding, "cache_sha256": state.answer_sha256, "line": call.line(
            f"the cache's answer (sha256 {state.answer_sha256[:12]}) differs from the one the run {used} "
            f"(sha256 {call.sha256[:12]}){source}: edited or replaced after the run")})


def _cache_for(root: Path, cli: str | None) -> Path:
    """--cache-dir, else $MADBENCH_CACHE_DIR, else the cache the batch recorded in its manifest, else the default."""
    spec = read_manifest(root).spec if BatchDirs(root).manifest.is_file() else {}
    directory = resolve_cache_dir(cli, spec.get("cache_dir"))
    if not (directory / "responses").is_dir():
        raise InputError(directory, f"no LLM response cache here (the cache for {root})",
                         "give the cache the runs used with --cache-dir")
    return directory


def cmd_cache_verify(args) -> int:
    verdict = _Verdict()
    by_cache: dict[Path, list[_Call]] = {}
    for root in map(Path, args.results_dirs):
        directory = _cache_for(root, args.cache_dir)
        for run, trace in _run_traces(root):
            verdict.runs.add(run)
            by_cache.setdefault(directory, []).extend(_recorded_calls(run, trace, verdict))
    for directory, calls in by_cache.items():
        verdict.caches.add(str(directory))
        with ResponseCache(directory, read_only=not args.drop) as cache:  # only --drop writes
            before = len(verdict.mismatched), len(verdict.corrupt)
            _check_calls(cache, calls, verdict)
            if args.drop:  # this cache's findings only
                bad = {f["key"] for f in verdict.mismatched[before[0]:] + verdict.corrupt[before[1]:]}
                verdict.dropped += sum(cache.delete(key) for key in bad)
    return _report_verify(verdict, args.json)


def _report_verify(v: _Verdict, as_json: bool) -> int:
    bad = bool(v.mismatched or v.corrupt)
    if as_json:
        print(json.dumps({"clean": not bad, "caches": sorted(v.caches), "runs": len(v.runs), "calls": v.calls, "ok": v.ok,
                          "mismatched": v.mismatched, "corrupt": v.corrupt, "missing": v.missing,
                          "unrecorded": v.unrecorded, "superseded": v.superseded, "dropped": v.dropped,
                          "trace_problems": v.notes}, indent=1))
        return 1 if bad else 0
    for finding in v.mismatched + v.corrupt:
        print(finding["line"])
    for note in v.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"checked {v.calls} calls of {len(v.runs)} run{'s' * (len(v.runs) != 1)} against {', '.join(sorted(v.caches))}: {v.ok} match, "
          f"{len(v.mismatched)} differ, {len(v.corrupt)} corrupt, {v.missing} not in the cache (pruned, never cached, or from a "
          f"provider that is not cached), {v.unrecorded} recorded no answer"
          + (f", {v.superseded} superseded (an answer a resumed run refused, or one a later fresh answer replaced)"
             if v.superseded else "") + (f"; dropped {v.dropped} entries" if v.dropped else ""))
    return 1 if bad else 0


def cmd_model_serve(args) -> int:
    server = LocalServer(args.name, threads=args.threads, reuse_prefix=args.reuse_prefix)
    state = server.ensure()
    print(f"local/{args.name} serving at {state.api_base} (pid {state.pid}); Ctrl-C stops it", flush=True)
    try:
        while server.read_state() is not None:
            time.sleep(2)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop_if_owner(state)
    return 0


def cmd_model_status(args) -> int:
    state = LocalServer(args.name).read_state()
    print(f"local/{args.name}: " + (f"up at {state.api_base} (pid {state.pid})" if state else "not running"))
    return 0


def cmd_model_stop(args) -> int:
    print(f"local/{args.name}: " + ("stopped" if LocalServer(args.name).stop() else "was not running"))
    return 0
