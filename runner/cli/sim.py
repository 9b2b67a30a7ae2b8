"""`madbench sim serve`: the simulated OpenAI-compatible provider, on a port of your choice, until Ctrl-C."""

from __future__ import annotations

import signal
import threading

from madbench_data.errors import InputError
from runner.cli.commands import command_parser
from runner.sim.provider import SimConfig, SimProvider


def register(sub) -> None:
    p = command_parser(sub, "sim")
    sim = p.add_subparsers(dest="sim_cmd", required=True, metavar="ACTION", help="what to do with the simulated provider")
    p = sim.add_parser("serve", help="serve the simulated provider until Ctrl-C; debate turns get rule-based answers",
                       description="Serve madbench's simulated OpenAI-compatible provider until Ctrl-C. It enforces its own "
                                   "RPM/TPM limits (429 with Retry-After beyond them) with a lognormal latency. A model spec "
                                   "with send_context: true sends each debate turn's structured task (madbench_context), "
                                   "which it answers with the rule-based analysts; any other request gets "
                                   '{"answer": <digest of the prompt>}.')
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0 picks a free one)")
    p.add_argument("--rpm", type=float, help="requests per minute it allows, over a sliding 60 s window; more get 429 "
                                             "with Retry-After (default: no limit)")
    p.add_argument("--tpm", type=float, help="tokens per minute it allows (prompt characters / 4 + 16 a request; default: no limit)")
    p.add_argument("--latency-median", type=float, default=0.0, help="median answer latency in s, lognormal (default 0: answer at once)")
    p.add_argument("--latency-sigma", type=float, default=0.5, help="sigma of the lognormal latency (default 0.5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the latency draws (default 0)")
    p.set_defaults(func=cmd_sim_serve)


def _check(args) -> SimConfig:
    for name, value in (("--rpm", args.rpm), ("--tpm", args.tpm)):
        if value is not None and value <= 0:
            raise InputError(name, f"must be > 0, got {value:g}", "leave it out for no limit")
    for name, value in (("--latency-median", args.latency_median), ("--latency-sigma", args.latency_sigma)):
        if value < 0:
            raise InputError(name, f"must be >= 0, got {value:g}", "e.g. --latency-median 2 --latency-sigma 0.5")
    if not 0 <= args.port <= 65535:
        raise InputError("--port", f"must lie in 0..65535, got {args.port}", "e.g. --port 8000, or 0 for a free port")
    return SimConfig(latency_median_s=args.latency_median, latency_sigma=args.latency_sigma, rpm=args.rpm, tpm=args.tpm,
                     seed=args.seed)


def _limit(value: float | None) -> str:
    return "no limit" if value is None else f"{value:g}"


def cmd_sim_serve(args) -> int:
    config = _check(args)
    try:
        server = SimProvider(config, host=args.host, port=args.port)
    except OSError as exc:
        raise InputError(f"{args.host}:{args.port}", f"cannot listen there: {exc.strerror or exc}",
                         "choose another --port (0 picks a free one) or --host") from None
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():  # `kill` stops it as cleanly as Ctrl-C
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    url = server.url
    with server:
        print(f"madbench sim: simulated OpenAI-compatible provider at {url} (rpm {_limit(config.rpm)}, "
              f"tpm {_limit(config.tpm)}, latency median {config.latency_median_s:g} s, sigma {config.latency_sigma:g}); "
              "Ctrl-C stops it", flush=True)
        print(f"Point a model spec at it, e.g. a batch file's model or a tier in a debate config's models:\n"
              f"  {{model: openai/madbench-sim, api_base: {url}, send_context: true}}\n"
              "send_context makes the gateway send each debate turn's structured task (madbench_context) beside the prompt,\n"
              "so the answers come from the rule-based analysts and fit the turn's schema; without it every answer is\n"
              '{"answer": <digest of the prompt>}. Never set send_context for a real provider.\n'
              f"Try it: madbench llm ask --model openai/madbench-sim --api-base {url} --prompt hi --no-cache", flush=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
    s = server.stats
    print(f"madbench sim: stopped after {s.requests} requests ({s.rejected_429} refused with 429)", flush=True)
    return 0
