"""`madbench rescore`: grade stored traces again with another scorer or rubric."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from madbench_data.errors import InputError
from madbench_data.markdown import markdown_table
from madbench_gateway import Gateway, ModelSpec, ResponseCache, resolve_cache_dir
from runner.cli.commands import command_parser
from runner.cli.common import CACHE_DIR_HELP
from scoring.agreement import audit_agreement, pillar_agreement
from scoring.crit import PILLARS
from scoring.rescore import ORIGINAL, extract_original, find_runs, read_scores, rescore_runs
from scoring.rubric import load_rubric


def register(sub) -> None:
    p = command_parser(sub, "rescore")
    p.add_argument("results_dir", help="a batch results directory or a `madbench debate --out` directory")
    p.add_argument("--scorer", required=True, help="model for CRIT: rules (non-LLM), local/gemma3-270m, openai/gpt-4o-mini, …")
    p.add_argument("--rubric", default="uniform", help="rubric name in configs/rubrics/ or a file (default uniform)")
    p.add_argument("--label", help="name of the new scores table (default: scorer and rubric)")
    p.add_argument("--api-base", help="OpenAI-compatible endpoint for the scorer model")
    p.add_argument("--api-key-env", help="environment variable holding the scorer's key")
    p.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    p.add_argument("--concurrency", type=int, default=8, help="turns scored at once (the limiter still applies; default 8)")
    p.set_defaults(func=cmd_rescore)


def cmd_rescore(args) -> int:
    scorer = "rules/crit" if args.scorer == "rules" else args.scorer
    if "/" not in scorer:
        raise InputError("--scorer", f"{args.scorer!r} is not a model", "write rules, local/gemma3-270m or a litellm model string")
    rubric = load_rubric(args.rubric)
    label = args.label or re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{scorer}.{rubric.name}")
    if label == ORIGINAL:
        raise InputError("--label", "'original' is reserved for the debate's own scores", "choose another label")
    root = Path(args.results_dir)
    runs, skipped = find_runs(root)
    scores_dir = root / "scores"
    extract_original(runs, scores_dir)
    spec = ModelSpec(model=scorer, api_base=args.api_base, api_key_env=args.api_key_env)
    with ResponseCache(resolve_cache_dir(args.cache_dir)) as cache:
        gateway = Gateway(cache=cache)
        counts = asyncio.run(rescore_runs(runs, scores_dir, label, spec, rubric, gateway, args.concurrency))
    t = gateway.totals
    print(f"{len(runs)} finished runs ({len(skipped)} skipped); label {label}: scored {counts['runs_scored']} runs "
          f"({counts['turns']} turns), {counts['runs_skipped_existing']} already scored")
    print(f"scorer calls: {t.calls} ({t.cached} from cache, {t.http_attempts} provider attempts); tables in {scores_dir}")
    original, new = read_scores(scores_dir, ORIGINAL), read_scores(scores_dir, label)
    if original.empty or new.empty:
        return 0
    tag = lambda frame: "non-LLM" if not frame.is_llm.any() else "LLM"  # noqa: E731
    print(f"\nagreement per pillar: {ORIGINAL} ({original.scorer.iloc[0]}, {tag(original)}) vs {label} ({new.scorer.iloc[0]}, {tag(new)})")
    table = pillar_agreement(original, new, [*PILLARS, "rho"])
    print(markdown_table(table))
    print(f"\nscorer counts vs deterministic audit ({label}):")
    print(markdown_table(audit_agreement(new)))
    return 0
