"""Entry point of the local model server process (started by ``LocalServer``).

It is llama-cpp-python's OpenAI-compatible server with two settings fixed for
research use, and a watchdog that exits when the process that started it is
gone: logits for the last token only (the default keeps all of them,
3.3 GB here) and, unless --reuse-prefix, a context reset before every request.
llama.cpp otherwise reuses a cached prompt prefix, which changes the output
bytes of an identical request depending on what was asked before it.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from typing import Any


def _watch_owner(pid: int) -> None:

    def watch() -> None:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(0)  # immediately: a generation in flight for a dead owner is wasted CPU
            except PermissionError:
                pass
            time.sleep(1.0)

    threading.Thread(target=watch, daemon=True).start()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m madbench.gateway.local_server_main")
    p.add_argument("--model", required=True)
    p.add_argument("--alias", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--reuse-prefix", action="store_true")
    p.add_argument("--owner-pid", type=int, default=None,
                   help="exit when this process is gone (a killed owner must not leave a server burning CPU)")
    args = p.parse_args()
    if args.owner_pid:
        _watch_owner(args.owner_pid)

    import llama_cpp
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    if not args.reuse_prefix:
        original = llama_cpp.Llama.generate

        def generate_from_scratch(self: Any, tokens: Any, *a: Any, **kw: Any) -> Any:
            self.reset()  # n_tokens = 0: no prefix match, the whole prompt is evaluated afresh
            return original(self, tokens, *a, **kw)

        # setattr: a method patched for this server process, which a type checker rightly refuses as an assignment
        setattr(llama_cpp.Llama, "generate", generate_from_scratch)  # noqa: B010

    app = create_app(
        server_settings=ServerSettings(host="127.0.0.1", port=args.port),
        model_settings=[ModelSettings(model=args.model, model_alias=args.alias, n_ctx=args.n_ctx,
                                      n_threads=args.threads, n_threads_batch=args.threads,
                                      logits_all=False, verbose=False)],
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
