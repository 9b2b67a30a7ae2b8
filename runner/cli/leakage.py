"""`madbench leakage audit`: the residue of blind memos and a re-identification probe (``madbench.runner.leakage_audit``)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from madbench.data.atomic import atomic_write, frame_writer
from madbench.data.errors import InputError
from madbench.data.macro_anonymity import reference_blocks
from madbench.data.markdown import markdown_table
from madbench.data.market.pack import load_pack as load_pack_dir
from madbench.data.market.pack import resolve_evidence_dirs, resolve_pack_dir
from madbench.data.residue import RESIDUE_KINDS
from madbench.data.scenario import find_scenario, load_scenarios
from madbench.eval.stats.frame import json_safe
from madbench.eval.stats.identification import identify_summary
from madbench.gateway import ModelSpec, ResponseCache, resolve_cache_dir
from madbench.results.layout import LEAKAGE_AUDIT
from madbench.runner.batch import load_batch, resolve_configs, resolve_scenarios
from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import (
    CACHE_DIR_HELP,
    add_blind_options,
    add_model_deployment,
    add_pack_args,
    blind_options,
    called_spec,
    check_out,
    given_blind_options,
    id_list,
    load_pack,
    model_deployments,
    number,
)
from madbench.runner.exit_codes import EXIT_RUNS_FAILED
from madbench.runner.leakage_audit import ProbeFailed, blind_memos, identify, macro_k_line, masked_share, residue_table
from madbench.runner.preflight import probe_temperature, require_endpoint, spec_problems
from madbench.runner.recall_probe import check_model
from madbench.runner.wiring import build_gateway, build_providers

#: How many of the most masked lower-case words the audit names.
TOP_TERMS = 30
SHOWN = ["group", "target", "memos", "trials", "hits", "rate", "chance", "cp_low", "cp_high", "wilson_low", "wilson_high",
         "recognised", "recognised_low", "recognised_high"]


def register(sub) -> None:
    p = command_parser(sub, "leakage")
    leak = p.add_subparsers(dest="leakage_cmd", required=True, metavar="ACTION", help="what to do")
    p = leak.add_parser("audit", help="the residue of each blind memo (offline) and, with --model, how often a model "
                                      "names its companies and quarter, against chance",
                        description="Build each scenario's blind memo as a blind run does; count what could still "
                                    "identify it (names, years, month names, exact macro levels, lower-case terms, "
                                    "exact amounts) and how many quarters of the pack 2018Q1-2025Q4 share its blind "
                                    "macro block (its k-anonymity); with --model, show "
                                    "each blind memo to the model through the gateway and ask the company of each asset "
                                    "and the quarter; report hit rates with 95% intervals against chance.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--scenarios", metavar="F", help="scenario YAML file")
    src.add_argument("--batch", metavar="B", help="a batch YAML file: its scenarios (file and draws), pack, evidence and "
                                                  "the blind options of its blind config, as its runs would build them")
    p.add_argument("--ids", help="comma-separated scenario ids of the --scenarios file (default: all)")
    p.add_argument("--model", help="a language model to probe, e.g. openai/gpt-5-mini (default: the residue pass only)")
    add_model_deployment(p, "--model")
    p.add_argument("--send-context", action="store_true", help="send each request's answer key (digests) beside the "
                                                                "prompt: only for `madbench sim serve`, never a real provider")
    p.add_argument("--timeout", type=number(gt=0, le=3600), default=120.0, help="seconds per attempt (default 120)")
    add_blind_options(p, "of the memos audited")
    p.add_argument("--out", help="folder for residue.parquet, identify.parquet and identify_summary.parquet (default "
                                 "results/leakage_audit/<what is audited>: the batch or scenario file's name, then any "
                                 "--blind-* option given and the --model, e.g. results/leakage_audit/leakage+openai-gpt-5-mini)")
    p.add_argument("--json", action="store_true", help="print the tables as JSON records")
    p.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the response cache")
    add_pack_args(p)
    p.set_defaults(func=cmd_leakage_audit)


def batch_memo_inputs(args):
    """(scenarios, pack, blind options of its first blind config) of the batch ``args.batch``, as its runs resolve
    them (--pack and --evidence, when given, win as they do for `madbench run`); a batch without a blind config has
    no blind memo to audit."""
    spec, base = load_batch(args.batch)
    blind = [c.blind for c in resolve_configs(spec, base, args.batch) if c.blind.enabled]
    if not blind:
        raise InputError(args.batch, "no config of this batch is blind (blind.enabled), so its runs send no blind memo "
                         "to audit", "give a batch with a blind config, or audit a scenario file with --scenarios")
    pack_dir = resolve_pack_dir(args.pack or (str(base / spec.pack) if spec.pack else None))
    evidence = resolve_evidence_dirs(args.evidence or [str(base / e) for e in spec.evidence] or None)
    pack = load_pack_dir(pack_dir, evidence)
    return resolve_scenarios(spec, base, pack, args.batch), pack, blind[0]


def probe_spec(args) -> tuple[ModelSpec, str] | None:
    """The model --model and its deployment options describe, with the option that gave its api_base (None without
    --model), refused here when no call to it could succeed (an unknown provider, a missing key), as `madbench run`'s
    preflight refuses it."""
    if not args.model:
        for flag, value in (("--api-base", args.api_base), ("--api-key-env", args.api_key_env), ("--rpm", args.rpm),
                            ("--routing", args.routing), ("--set", args.settings or None)):
            if value is not None:
                raise InputError(flag, "is for the identification probe, which only --model asks for",
                                 "give --model, or leave the option out")
        return None
    if not args.routing:  # with --routing, a tier's name: its model is checked below
        check_model(args.model)
    model = model_deployments(args, [args.model])[0]
    spec = called_spec(model, send_context=args.send_context,
                       retry=model.spec.retry.model_dump() | {"timeout_s": args.timeout})
    check_model(spec.model)
    problems = spec_problems(spec) or probe_problems_at(spec)
    if problems:
        raise InputError("--model", "; ".join(problems), "give a model that can be called")
    return spec, model.api_base_from


#: The temperature the standalone probe asks a model that refuses 0 at: the providers' default (gpt-5 takes only it).
FALLBACK_TEMPERATURE = 1.0


def standalone_temperature(spec: ModelSpec) -> float:
    return probe_temperature(build_providers().for_model(spec.model), spec, FALLBACK_TEMPERATURE)


def probe_problems_at(spec: ModelSpec) -> list[str]:
    """What the probe's calls would be refused for at the temperature it asks at (structured output included)."""
    t = standalone_temperature(spec)
    return [f"{p} (the identification probe, at temperature {t:g})"
            for p in build_providers().for_model(spec.model).preflight(spec, t, None)]


def default_out(args) -> str:
    """The audit's folder when --out is not given: one per thing audited (a batch or scenario file, the blind options
    given, the model), so that two different audits never write over each other; named as a batch's own audit is
    (``<results>/leakage_audit/``)."""
    parts = [Path(args.batch or args.scenarios).stem, *(f"{flag.removeprefix('--')}-{getattr(args, flag[2:].replace('-', '_'))}"
                                                         for flag in given_blind_options(args))]
    if args.model:
        parts.append(args.model)
    name = "+".join(parts)
    return str(Path("results") / LEAKAGE_AUDIT / "".join(c if c.isalnum() or c in "_.+=-" else "-" for c in name))


def cmd_leakage_audit(args) -> int:
    out = check_out(args.out if args.out is not None else default_out(args), "--out")
    probed = probe_spec(args)
    spec = probed[0] if probed else None
    if args.batch:
        if args.ids is not None:
            raise InputError("--ids", "selects from a --scenarios file", "drop it, or edit the batch's scenarios.ids")
        if given_blind_options(args):
            raise InputError(given_blind_options(args)[0], "the batch's blind config sets the blind options",
                             "leave it out, or edit the config's `blind:` block")
        ids = None
    else:
        ids = None if args.ids is None else id_list(args.ids, "--ids")
    options = blind_options(args)
    if args.batch:
        scenarios, pack, options = batch_memo_inputs(args)
    else:
        scenarios = load_scenarios(args.scenarios)
        if ids is not None:
            scenarios = [find_scenario(scenarios, i, args.scenarios)[1] for i in ids]
        pack = load_pack(args)
    if spec is not None:  # once the inputs are read (it sends a request), before the memos and minutes of retries
        require_endpoint(spec.api_base, {spec.model}, probed[1] if probed else "--api-base")
    memos = blind_memos(scenarios, pack, options)
    reference = reference_blocks(pack, options)
    residue = residue_table(memos, reference)
    tables = {"residue": residue}
    if spec is not None:
        cache = None if args.no_cache else ResponseCache(resolve_cache_dir(args.cache_dir))
        gateway = build_gateway(cache=cache)
        try:
            obs = asyncio.run(identify(gateway, spec, memos, pack, standalone_temperature(spec)))
        except ProbeFailed as exc:
            print(f"madbench: leakage audit failed: {exc}", file=sys.stderr)
            return EXIT_RUNS_FAILED
        finally:
            if cache:
                cache.close()
        tables |= {"identify": obs, "identify_summary": identify_summary(obs)}
    for name, frame in tables.items():
        atomic_write(out / f"{name}.parquet", frame_writer(frame))
    if args.json:
        print(json.dumps({k: json_safe(v.to_dict(orient="records")) for k, v in tables.items()}, indent=1, default=str))
        return 0
    totals = {k: int(residue[k].sum()) for k in RESIDUE_KINDS}
    print(f"residue over {len(residue)} blind memos (options {options.model_dump(exclude={'enabled'})}): "
          + ", ".join(f"{k} {n}" for k, n in totals.items()))
    masked = masked_share(memos)
    if masked.tokens:
        print(f"masked: {masked.share:.1%} of the texts' {masked.tokens} tokens ("
              + ", ".join(f"{c} {n / masked.tokens:.1%}" for c, n in masked.by_class.items()) + "); most masked terms: "
              + ", ".join(f"{w} {n}" for w, n in masked.terms[:TOP_TERMS]))
    print(macro_k_line(residue, reference))
    left = residue[residue["total"] > 0]
    if len(left):
        print(markdown_table(left[["scenario_id", *RESIDUE_KINDS, "examples"]]))
    if "identify_summary" in tables:
        print(f"\nidentification by {args.model} (95% intervals; recognised = (rate - chance) / (1 - chance)):")
        print(markdown_table(tables["identify_summary"][SHOWN].round(3)))
    print(f"tables: {', '.join(str(out / f'{n}.parquet') for n in tables)}")
    return 0
