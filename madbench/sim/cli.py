"""`madbench sim serve`: the simulated OpenAI-compatible provider, or a protocol double of OpenAI's, Anthropic's or
Gemini's API (madbench/sim), on a port of your choice, until Ctrl-C."""

from __future__ import annotations

import math
import signal
import threading
from pathlib import Path

from madbench.data.errors import InputError
from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import number
from madbench.sim.anthropic_api import AnthropicDouble
from madbench.sim.api_double import FAULTS, ApiDouble
from madbench.sim.gemini_api import GeminiDouble
from madbench.sim.identify_answers import IdentifyAnswerer
from madbench.sim.openai_api import OpenAIDouble
from madbench.sim.provider import SimConfig, SimProvider

#: --api: the double, the model string to point at it, and the variable its key is read from.
DOUBLES: dict[str, tuple[type[ApiDouble], str, str]] = {
    "openai": (OpenAIDouble, "openai/gpt-5-mini", "OPENAI_API_KEY"),
    "anthropic": (AnthropicDouble, "anthropic/claude-haiku-4-5", "ANTHROPIC_API_KEY"),
    "gemini": (GeminiDouble, "gemini/gemini-2.5-flash", "GEMINI_API_KEY"),
}


def register(sub) -> None:
    p = command_parser(sub, "sim")
    sim = p.add_subparsers(dest="sim_cmd", required=True, metavar="ACTION", help="what to do with the simulated provider")
    p = sim.add_parser("serve", help="serve the simulated provider (or a provider's API double) until Ctrl-C; debate "
                                     "turns get rule-based answers",
                       description="Serve madbench's simulated OpenAI-compatible provider until Ctrl-C. It enforces its own "
                                   "RPM/TPM limits (429 with Retry-After beyond them) with a lognormal latency. A model spec "
                                   "with send_context: true sends each debate turn's structured task (madbench_context), "
                                   "which it answers with the rule-based analysts; any other request gets "
                                   '{"answer": <digest of the prompt>}. With --api openai|anthropic|gemini it serves a double '
                                   "of that provider's API instead: its paths, auth header, request checks, usage fields, "
                                   "finish reasons, error bodies and rate-limit headers, as documented, reached through "
                                   "litellm with api_base.")
    p.add_argument("--api", choices=["sim", *DOUBLES], default="sim",
                   help="sim (default): the simulated provider; openai, anthropic, gemini: that provider's API double")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=number(int, ge=0, le=65_535), default=8000, help="port to listen on (default 8000; 0 picks a free one)")
    p.add_argument("--rpm", type=number(gt=0), help="requests per minute it allows, over a sliding 60 s window; more get 429 "
                                             "with Retry-After (default: no limit; --api sim only)")
    p.add_argument("--tpm", type=number(gt=0), help="tokens per minute it allows (prompt characters / 4 + 16 a request; default: "
                                             "no limit; --api sim only)")
    p.add_argument("--latency-median", type=number(ge=0, le=3600), default=0.0, help="median answer latency in s, lognormal (default 0: "
                                                                     "answer at once; --api sim only)")
    p.add_argument("--latency-sigma", type=number(ge=0, le=10), default=0.5, help="sigma of the lognormal latency (default 0.5)")
    p.add_argument("--seed", type=number(int, ge=0), default=0, help="seed of the latency draws (default 0)")
    p.add_argument("--batch-delay", type=number(ge=0, le=86_400), default=0.0,
                   help="seconds a provider batch (/v1/files and /v1/batches, for `madbench run --provider-batch`) takes "
                        "from its creation to completed (default 0; --api sim only)")
    p.add_argument("--batch-fail-rate", type=number(ge=0, le=1), default=0.0,
                   help="share of a provider batch's requests answered with an error, to be resubmitted (default 0; "
                        "--api sim only)")
    p.add_argument("--batch-expire", type=number(int, ge=0), default=0,
                   help="the first N provider batches expire with half their requests answered, as a batch past its "
                        "completion window does (default 0; --api sim only)")
    p.add_argument("--fault", choices=FAULTS, help="a double only: answer every request with this fault, in the provider's "
                                                   "form (e.g. overloaded: Anthropic's 529), to watch retries and fallbacks")
    p.add_argument("--hidden-tokens", type=number(int, ge=0, le=1_000_000), default=0, help="a double only: reasoning (OpenAI's reasoning models) or "
                                                                "thinking (Gemini) tokens billed per answer (default 0)")
    p.add_argument("--recognise", type=number(ge=0, le=1), default=0.0,
                   help="share of memos the simulated model recognises in `madbench leakage audit` (naming every asset's "
                        "company and the quarter), chosen by memo digest; the others get uniform guesses (default 0)")
    p.add_argument("--record-recognised", type=Path, metavar="FILE",
                   help="append a JSON line per memo asked about, saying whether the simulated model recognised it (the "
                        "truth an audit's estimate is checked against)")
    p.set_defaults(func=cmd_sim_serve)


def _check(args) -> SimConfig:
    if args.record_recognised is not None:  # opened now: a path it cannot append to is said before the server starts
        try:
            with open(args.record_recognised, "a"):
                pass
        except OSError as exc:
            raise InputError("--record-recognised", f"{args.record_recognised}: {exc.strerror or exc}",
                             "give a file path in a writable folder") from None
    for name, value in (("--rpm", args.rpm), ("--tpm", args.tpm)):
        if value is not None and value <= 0:
            raise InputError(name, f"must be > 0, got {value:g}", "leave it out for no limit")
    for name, value in (("--latency-median", args.latency_median), ("--latency-sigma", args.latency_sigma)):
        if value < 0:
            raise InputError(name, f"must be >= 0, got {value:g}", "e.g. --latency-median 2 --latency-sigma 0.5")
    if not 0 <= args.port <= 65535:
        raise InputError("--port", f"must lie in 0..65535, got {args.port}", "e.g. --port 8000, or 0 for a free port")
    if not 0 <= args.batch_delay < math.inf or args.batch_expire < 0 or not 0 <= args.batch_fail_rate <= 1:
        raise InputError("--batch-delay/--batch-fail-rate/--batch-expire", "a delay and a count must be >= 0 and a rate "
                         f"in 0..1, got {args.batch_delay:g}, {args.batch_fail_rate:g}, {args.batch_expire}",
                         "e.g. --batch-delay 30 --batch-fail-rate 0.05 --batch-expire 1")
    if args.api == "sim":
        for name, value in (("--fault", args.fault), ("--hidden-tokens", args.hidden_tokens or None)):
            if value is not None:
                raise InputError(name, "only a provider's API double takes it", "add --api openai|anthropic|gemini")
    else:
        for name, value in (("--rpm", args.rpm), ("--tpm", args.tpm), ("--latency-median", args.latency_median or None),
                            ("--batch-delay", args.batch_delay or None), ("--batch-fail-rate", args.batch_fail_rate or None),
                            ("--batch-expire", args.batch_expire or None)):
            if value is not None:
                raise InputError(name, f"only the simulator enforces limits and latency and serves provider batches; the "
                                       f"{args.api} double answers at once (its faults are --fault)", "drop it, or use --api sim")
        if args.hidden_tokens < 0:
            raise InputError("--hidden-tokens", f"must be >= 0, got {args.hidden_tokens}", "e.g. --hidden-tokens 64")
    return SimConfig(latency_median_s=args.latency_median, latency_sigma=args.latency_sigma, rpm=args.rpm, tpm=args.tpm,
                     seed=args.seed)


def _limit(value: float | None) -> str:
    return "no limit" if value is None else f"{value:g}"


def _server(args, config: SimConfig) -> SimProvider | ApiDouble:
    try:
        if args.api == "sim":
            sim = SimProvider(config, host=args.host, port=args.port,
                              identify=IdentifyAnswerer(share=args.recognise, seed=args.seed,
                                                        record_path=args.record_recognised))
            batches = sim.batches.config
            batches.completion_delay_s, batches.fail_rate, batches.expire_next = (args.batch_delay, args.batch_fail_rate,
                                                                                   args.batch_expire)
            batches.seed = args.seed
            return sim
        double = DOUBLES[args.api][0](host=args.host, port=args.port, hidden_tokens=args.hidden_tokens)
    except OSError as exc:
        raise InputError(f"{args.host}:{args.port}", f"cannot listen there: {exc.strerror or exc}",
                         "choose another --port (0 picks a free one) or --host") from None
    double.persistent = args.fault
    return double


def _banner(args, config: SimConfig, url: str) -> str:
    if args.api != "sim":
        _, model, env = DOUBLES[args.api]
        fault = f"every request answered with the fault {args.fault!r}" if args.fault else "no faults"
        return (f"madbench sim: {args.api} API double at {url} ({fault}); Ctrl-C stops it\n"
                f"Point a model spec at it (any non-empty key is accepted: export {env}=test):\n"
                f"  {{model: {model}, api_base: {url}, api_key_env: {env}, send_context: true}}\n"
                "send_context makes the gateway send each debate turn's structured task (madbench_context), which the\n"
                "double answers with the rule-based analysts. Never set send_context for the real provider.")
    return (f"madbench sim: simulated OpenAI-compatible provider at {url} (rpm {_limit(config.rpm)}, "
            f"tpm {_limit(config.tpm)}, latency median {config.latency_median_s:g} s, sigma {config.latency_sigma:g}); "
            "Ctrl-C stops it\n"
            f"Provider batches (/v1/files, /v1/batches; `madbench run --provider-batch`) complete after "
            f"{args.batch_delay:g} s, {args.batch_fail_rate:.0%} of their requests failed, the first {args.batch_expire} "
            "expiring half done\n"
            f"Point a model spec at it, e.g. a batch file's model or a tier in a debate config's models:\n"
            f"  {{model: openai/madbench-sim, api_base: {url}, send_context: true}}\n"
            "send_context makes the gateway send each debate turn's structured task (madbench_context) beside the prompt,\n"
            "so the answers come from the rule-based analysts and fit the turn's schema; without it every answer is\n"
            '{"answer": <digest of the prompt>}. Never set send_context for a real provider.\n'
            f"Try it: madbench llm ask --model openai/madbench-sim --api-base {url} --prompt hi --no-cache")


def cmd_sim_serve(args) -> int:
    config = _check(args)
    server = _server(args, config)
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():  # `kill` stops it as cleanly as Ctrl-C
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with server:
        print(_banner(args, config, server.url), flush=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
    if isinstance(server, ApiDouble):
        print(f"madbench sim: stopped after {len(server.requests)} requests ({len(server.faults_served)} answered "
              "with a fault)", flush=True)
    else:
        s = server.stats
        lines = sum(len(b.lines) for b in server.batches.batches.values())
        print(f"madbench sim: stopped after {s.requests} requests ({s.rejected_429} refused with 429) and "
              f"{len(server.batches.batches)} provider batches of {lines} requests", flush=True)
    return 0
