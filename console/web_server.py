"""The web process: uvicorn serving ``console.asgi`` (pages, APIs and WebSockets), started the same way everywhere.

    python -m console.web_server [--host 127.0.0.1] [--port 8000] [--proxy-headers] [--app console.asgi:application]

``make run``, the systemd unit, the browser tests and the benchmarks all start it through :func:`web_server_argv`, so
they run what production runs. Why uvicorn (with uvloop, httptools and the ``websockets`` protocol) and not daphne:
fanning a live session's tokens out to its viewers is a WebSocket write per viewer, and daphne (Twisted + Autobahn)
spent about 10 ms p50 writing one frame to 50 sockets where uvicorn spends 2-3 (bench/live_bench.py --server, same
run). ``daphne`` stays installed only for ``manage.py runserver``.

``--proxy-headers`` trusts ``X-Forwarded-For`` from the proxy on 127.0.0.1 only (sign-in limits count per client
address); without it the peer address is the client's, as a direct listener must do.
"""

from __future__ import annotations

import argparse
import os
import sys

APP = "console.asgi:application"
# uvicorn's fast paths; lifespan off: the Channels router has no lifespan protocol (uvicorn would log an error).
UVICORN_FLAGS = ("--ws", "websockets-sansio", "--loop", "uvloop", "--http", "httptools", "--lifespan", "off",
                 "--timeout-graceful-shutdown", "10")


def web_server_argv(host: str, port: int, *, app: str = APP, proxy_headers: bool = False,
                    access_log: bool = True, log_level: str = "info") -> list[str]:
    """The command line (after the Python interpreter) that serves ``app`` on ``host:port``."""
    argv = ["-m", "uvicorn", *UVICORN_FLAGS, "--host", host, "--port", str(port), "--log-level", log_level]
    argv += ["--proxy-headers", "--forwarded-allow-ips", "127.0.0.1"] if proxy_headers else ["--no-proxy-headers"]
    if not access_log:
        argv.append("--no-access-log")
    return [*argv, app]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Serve the console (uvicorn, as deployed).")
    p.add_argument("--host", "-b", default="127.0.0.1")
    p.add_argument("--port", "-p", type=int, default=8000)
    p.add_argument("--proxy-headers", action="store_true", help="trust X-Forwarded-For from a proxy on 127.0.0.1")
    p.add_argument("--app", default=APP)
    p.add_argument("--no-access-log", action="store_true")
    p.add_argument("--log-level", default="info")
    args = p.parse_args(argv)
    cmd = web_server_argv(args.host, args.port, app=args.app, proxy_headers=args.proxy_headers,
                          access_log=not args.no_access_log, log_level=args.log_level)
    # exec: the server is this process (signals from systemd or the supervisor reach uvicorn directly)
    os.execv(sys.executable, [sys.executable, *cmd])


if __name__ == "__main__":
    main()
