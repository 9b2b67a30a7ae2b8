"""`madbench stats` and `madbench power`: the statistics module from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from madbench.data.errors import InputError
from madbench.eval.stats.analysis import adjust_across, analyse
from madbench.eval.stats.batch_columns import batch_frame
from madbench.eval.stats.beats import PAPER_SHARE
from madbench.eval.stats.compute_match import compute_match, matched_pairs
from madbench.eval.stats.compute_match import markdown as compute_match_markdown
from madbench.eval.stats.family import CORRECTIONS, DEFAULT_CORRECTION
from madbench.eval.stats.frame import batch_order, batch_pairs, json_safe, load_runs, ordered_configs
from madbench.eval.stats.leakage_did import write_leakage_did
from madbench.eval.stats.power import power_table
from madbench.eval.stats.sequential_record import batch_summary, read_record
from madbench.eval.stats.split import split_by
from madbench.eval.stats.study import Batch, Study, analyse_study, combine, label_analysis
from madbench.eval.stats.sweep_record import read_record as read_sweep_record
from madbench.eval.stats.sweep_record import summary as sweep_summary
from madbench.results import BatchDirs, ResultsDir
from madbench.runner.batch_view import check_committed
from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import csv_list, number
from madbench.runner.committed import read_committed
from madbench.runner.study_dirs import read_batch, where


def register(sub) -> None:
    p = command_parser(sub, "stats")
    p.add_argument("results_dirs", nargs="*", metavar="RESULTS_DIR",
                   help="a results directory written by `madbench run`; several: one study, one family of tests, the "
                        "batch a column of every table (a config two batches share is named batch/config; a scenario "
                        "is its id in every batch; --out required)")
    p.add_argument("--from-parquet", metavar="FILE", help="any Parquet with config, scenario_id (replicate) and metric columns")
    p.add_argument("--compare", help="comma-separated configs, in column order (default: all, in run order)")
    p.add_argument("--metric", help="comma-separated metric columns (default: sharpe, returns, sortino, volatility, drawdown, rho_bar)")
    p.add_argument("--correction", choices=list(CORRECTIONS), default=DEFAULT_CORRECTION,
                   help="adjust the p of every pair × metric of this call as one family: holm (default), bh "
                        "(Benjamini–Hochberg) or none; the table marks adjusted p < 0.05")
    p.add_argument("--share", type=float, default=PAPER_SHARE,
                   help="share of scenarios beating 1/N to test beside 1/2 (default 1/3, the paper's 'about a third')")
    p.add_argument("--power", nargs="?", const="0.8,0.9", metavar="POWERS",
                   help="also plan the next study: scenarios each tested comparison needs at these powers (default "
                        "0.8,0.9), from a safeguarded effect and the quarter clustering in the data")
    p.add_argument("--paper-table", action="store_true",
                   help="also print the comparison table with the paper's uncorrected p < 0.15 superscripts, labelled")
    p.add_argument("--all-pairs", action="store_true", help="test every pair of configurations (default: the batch's declared "
                                                             "pairs, treatment − control, when it declares any)")
    p.add_argument("--out", help="folder for the CSV tables (default RESULTS_DIR/stats, or FILE-stats beside the Parquet)")
    p.add_argument("--json", action="store_true", help="print paired comparisons and per-configuration summaries as JSON records")
    p.add_argument("--by", metavar="COLUMN", help="every statistic once per value of a runs column, e.g. post_cutoff (null values "
                                                  "are their own part); CSV tables go to OUT/COLUMN=VALUE/")
    p.set_defaults(func=cmd_stats)

    p = command_parser(sub, "power")
    p.add_argument("--metric", default="sharpe", help="name of the metric (for the printout)")
    p.add_argument("--effect", type=number(gt=0), required=True, help="mean paired difference to detect, e.g. 0.14")
    p.add_argument("--sd", type=number(gt=0), required=True, help="standard deviation of the paired differences, e.g. 0.37")
    p.add_argument("--alpha", type=number(gt=0, lt=1), default=0.05, help="two-sided significance level (default 0.05)")
    p.add_argument("--power", default="0.8,0.9", help="target power(s), comma-separated (default 0.8,0.9)")
    p.add_argument("--n", type=number(int, ge=2), help="also report the power achieved with this many scenarios")
    p.add_argument("--json", action="store_true", help="print the table as one JSON object")
    p.set_defaults(func=cmd_power)


def _source(args) -> tuple[Path, Path | None, Path]:
    """(runs file, rounds file or None, default CSV dir) from RESULTS_DIR or --from-parquet."""
    if bool(args.results_dir) == bool(args.from_parquet):
        raise InputError("madbench stats", "give exactly one of RESULTS_DIR and --from-parquet FILE", "e.g. madbench stats results/rules-35")
    if args.from_parquet:
        file = Path(args.from_parquet)
        return file, None, file.parent / f"{file.stem}-stats"
    root = Path(args.results_dir)
    if not root.is_dir():
        raise InputError(str(root), "is not a results directory", "give the folder `madbench run` wrote (it holds runs.parquet)")
    read_committed(root, "stats", needs_manifest=False)  # only committed runs' rows; a running batch said to be a snapshot
    check_committed(root)  # a corrupt committed result is named, with what to do
    dirs = BatchDirs(root)
    rounds = dirs.table("rounds")
    return dirs.table("runs"), rounds if rounds.exists() else None, root / "stats"


def _powers(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        powers = [float(p) for p in text.split(",")]
    except ValueError:
        powers = []
    if not powers or any(not 0 < p < 1 for p in powers):
        raise InputError("--power", f"values must be numbers in (0, 1), got {text}", "e.g. --power 0.8,0.9")
    return powers


def _check(args) -> None:
    if not 0 < args.share < 1:
        raise InputError("--share", f"must lie in (0, 1), got {args.share}", "e.g. --share 0.333 (the paper's one third)")
    for flag, value in (("--compare", args.compare), ("--metric", args.metric)):
        if value is None:
            continue
        names = [v.strip() for v in value.split(",")]
        if not all(names):  # '' (an unset shell variable) or 'a,,b' would be taken as "not given" or a shorter list
            raise InputError(flag, f"{value!r} holds an empty name", "give comma-separated names, or leave the option out")
        if len(set(names)) < len(names):
            raise InputError(flag, f"{value!r} names one twice", "give each name once")


def cmd_stats(args) -> int:
    _check(args)
    powers = _powers(args.power)
    args.results_dir = args.results_dirs[0] if len(args.results_dirs) == 1 else None
    if len(args.results_dirs) > 1:
        return _stats_study(args, powers)
    runs_file, rounds_file, default_out = _source(args)
    runs = load_runs(args.results_dir or runs_file)
    rounds = ResultsDir(args.results_dir).rounds if rounds_file else None  # only a results directory has one
    compare = csv_list(args.compare)
    if compare is None and args.results_dir:
        compare = batch_order(args.results_dir, runs)
    # the batch's declared pairs (manifest.json keeps its spec), unless every pair is asked for
    declared = None if args.all_pairs or not args.results_dir else batch_pairs(args.results_dir)
    did = write_leakage_did(runs, declared, Path(args.out) if args.out else default_out)  # a leakage batch's estimate
    if did and not args.json:
        print(did)
    if args.by:
        return _stats_by(args, runs, rounds, compare, declared, str(runs_file), Path(args.out) if args.out else default_out)
    analysis = analyse(runs, str(runs_file), compare, csv_list(args.metric), args.correction, rounds, declared, args.share,
                       powers)
    record = read_record(args.results_dir) if args.results_dir else None
    if record is not None:  # a sequential batch: the looks' adjusted inference leads, the tables are naive
        analysis.sequential = batch_summary(record, runs)
    swept = read_sweep_record(args.results_dir) if args.results_dir else None
    if swept is not None:  # a sweep: each arm's adjusted inference leads, the tables below are naive
        analysis.sweep = sweep_summary(swept, runs)
    pairs = matched_pairs(runs, declared)  # equal compute per scenario, when an arm was matched
    matched = compute_match(runs, pairs, ResultsDir(args.results_dir).calls if pairs else None)
    return _print(args, analysis, matched, Path(args.out) if args.out else default_out)


def _print(args, analysis, matched: pd.DataFrame, out: Path) -> int:
    """Write the CSV tables under ``out`` and print the analysis (markdown, or JSON with ``--json``)."""
    written = analysis.write_csvs(out)
    if not matched.empty:
        out.mkdir(parents=True, exist_ok=True)
        matched.to_csv(out / "compute_match.csv", index=False)
        written.append(out / "compute_match.csv")
    if args.json:
        print(json.dumps(json_safe(analysis.record() | {"compute_match": matched.to_dict(orient="records")}), indent=1))
    else:
        print(analysis.markdown(args.paper_table))
        print(compute_match_markdown(matched))
        print(f"CSV tables: {', '.join(str(p) for p in written)}")
    return 0


def _stats_study(args, powers: list[float] | None) -> int:
    """``cmd_stats`` of several results directories as one study (``madbench.eval.stats.study``)."""
    if args.from_parquet:
        raise InputError("madbench stats", "give results directories or --from-parquet FILE, not both",
                         "e.g. madbench stats results/a results/b --out results/a+b-stats")
    if not args.out:
        raise InputError("madbench stats", f"{len(args.results_dirs)} results directories need --out FOLDER for the "
                         "study's CSV tables (no one batch's stats/ folder holds them)", "e.g. --out results/study-stats")
    batches = [read_batch(d, args.all_pairs) for d in args.results_dirs]  # each read and checked before any statistic
    study, here = combine(batches, args.all_pairs), where(batches)
    if args.by:
        return _stats_by(args, study.runs, study.rounds, csv_list(args.compare) or study.order, study.declared, here,
                         Path(args.out), study)
    analysis = analyse_study(study, here, csv_list(args.compare), csv_list(args.metric), args.correction, args.share, powers)
    analysis.sequential = study_sequential(batches, study)
    return _print(args, analysis, study_compute_match(batches, study, args.all_pairs), Path(args.out))


def study_sequential(batches: list[Batch], study: Study) -> dict | None:
    """The sequential batches' decisions, each line naming its batch; None when no batch is sequential."""
    summaries = [(label, batch_summary(record, b.runs)) for label, b in zip(study_labels(study), batches, strict=True)
                 if (record := read_record(b.root)) is not None]
    if not summaries:
        return None
    return {"lines": [f"{label}: {line}" for label, s in summaries for line in s["lines"]],
            "batches": [{"batch": label, **s} for label, s in summaries]}


def study_compute_match(batches: list[Batch], study: Study, all_pairs: bool) -> pd.DataFrame:
    """Equal compute per scenario of each batch's matched declared pairs, configs named as in the study, with their
    batch columns."""
    parts = []
    for label, b in zip(study_labels(study), batches, strict=True):
        pairs = [] if all_pairs else matched_pairs(b.runs, b.declared)
        part = compute_match(b.runs, pairs, ResultsDir(b.root).calls if pairs else None)
        if not part.empty:
            rename = lambda c, label=label: study.names[(label, c)]
            parts.append(part.assign(treatment=part["treatment"].map(rename), control=part["control"].map(rename)))
    return batch_frame(pd.concat(parts, ignore_index=True), study.batches) if parts else pd.DataFrame()


def study_labels(study: Study) -> list[str]:
    return [row["batch"] for row in study.table]


def _stats_by(args, runs, rounds, compare: list[str] | None, declared, where: str, out: Path,
              study: Study | None = None) -> int:
    """``cmd_stats`` once per value of ``--by``: the same tables, each under a heading naming the value."""
    compare = ordered_configs(runs, compare, where)  # unknown --compare names fail here, once
    parts = split_by(runs[runs["config"].isin(compare)], args.by, "--by")
    analyses = []
    for label, part in parts:
        present = set(part["config"].astype(str))
        here = f"{where} ({args.by}={label})"
        part_rounds = rounds[rounds["run_id"].isin(part["run_id"])] if rounds is not None and "run_id" in part else rounds
        analyses.append(analyse(part, here, [c for c in compare if c in present], csv_list(args.metric), args.correction,
                                part_rounds, declared, args.share, _powers(args.power)))
        if study is not None:
            label_analysis(analyses[-1], study, all_pairs=declared is None)
    adjust_across(analyses, args.correction)  # one call, one family: every part's tests together
    records, texts = [], []
    for (label, part), analysis in zip(parts, analyses, strict=True):
        written = analysis.write_csvs(out / f"{args.by}={label}")
        records.append({"by": args.by, "value": label, "runs": len(part), **analysis.record()})
        texts.append(f"# {args.by} = {label} ({len(part)} runs)\n\n{analysis.markdown(args.paper_table)}\n"
                     f"CSV tables: {', '.join(str(p) for p in written)}\n")
    if args.json:
        print(json.dumps(json_safe(records), indent=1))
    else:
        print(f"Split by {args.by}: " + ", ".join(f"{r['value']} {r['runs']} runs" for r in records) + "\n")
        print("\n".join(texts))
    return 0


def cmd_power(args) -> int:
    if args.sd <= 0:
        raise InputError("--sd", f"must be > 0, got {args.sd}", "give the standard deviation of the paired differences")
    if args.effect == 0:
        raise InputError("--effect", "must be non-zero", "give the smallest mean difference worth detecting, e.g. 0.14")
    try:
        powers = [float(p) for p in args.power.split(",")]
    except ValueError:
        raise InputError("--power", f"{args.power!r} is not a comma-separated list of numbers", "e.g. --power 0.8,0.9") \
            from None
    if any(not 0 < p < 1 for p in powers):
        raise InputError("--power", f"values must lie in (0, 1), got {args.power}", "e.g. --power 0.8,0.9")
    if not 1e-6 <= abs(args.effect) / args.sd <= 1e3:  # outside it no paired design is meaningful (nor solvable)
        raise InputError("--effect", f"d_z = effect / sd = {abs(args.effect) / args.sd:.3g} lies outside [1e-6, 1e3]",
                         "give the effect and the SD of the paired differences in the metric's own units")
    table = power_table(args.effect, args.sd, powers, args.alpha, args.n)
    if args.json:
        print(json.dumps(table, indent=1))
        return 0
    print(f"Paired t-test on {args.metric}: detect a mean difference of {args.effect:g} with SD of differences {args.sd:g} "
          f"(d_z = {table['d_z']:.3f}), two-sided alpha = {args.alpha:g}")
    for row in table["needed"]:
        print(f"  power {row['power']:.0%}: {row['scenarios']} paired scenarios")
    if "power_at_current_n" in table:
        cur = table["power_at_current_n"]
        print(f"  with n = {cur['n']}: power {cur['power']:.1%}")
    return 0
