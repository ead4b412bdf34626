"""Command line: run the Toxiproxy-compatible server in the foreground.

``python -m faults.proxy [--host H] [--port P]`` or, once the lead wires
:func:`add_parser` into the ``chaoslog`` console script, ``chaoslog proxy``.
It prints one line saying where the API listens, serves until SIGINT or
SIGTERM, then closes every proxy.  A port that cannot be bound is a one-line
error and exit status 2 (argparse's status for usage errors), so scripts can
tell it from a crash.

The API and the proxies listen on loopback addresses only; ``--host`` or a
proxy's ``listen`` elsewhere (``0.0.0.0`` included) is refused the same way,
unless ``--allow-non-loopback`` is given: then each listener beyond loopback
prints one warning line on stderr, with ``--bind-reason`` if given
(faults/proxy/exposure.py; README.md, "Control surfaces").
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from .exposure import FLAG, Exposure
from .proxy import ListenError
from .server import ProxyServer

EXIT_LISTEN_ERROR = 2


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address of the HTTP API (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8474,
                        help="port of the HTTP API, 0 for any free port (default: %(default)s)")
    parser.add_argument(FLAG, dest="allow_non_loopback", action="store_true",
                        help="let the API and the proxies listen on addresses other than "
                             "loopback (0.0.0.0 included); each one bound prints a warning: "
                             "whoever reaches the API can inject faults")
    parser.add_argument("--bind-reason", default="", metavar="TEXT",
                        help=f"why the listeners are not on loopback, said in the warning "
                             f"(with {FLAG}; the docker backend's proxy container gives one)")
    parser.add_argument("--label", default=None,
                        help="a text to carry on the command line (unused: whoever started the "
                             "proxy finds its process by it)")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``proxy`` subcommand on an argparse subparsers object."""
    parser = subparsers.add_parser(
        "proxy",
        help="run the Toxiproxy-compatible fault proxy",
        description="Run the Toxiproxy-compatible proxy server until SIGINT/SIGTERM.",
    )
    _add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Serve in the foreground; 0 after a signal, 2 if the API cannot listen
    (or may not: not loopback, without the flag)."""
    allow = getattr(args, "allow_non_loopback", False)
    reason = getattr(args, "bind_reason", "")
    if reason and not allow:
        print(f"chaoslog proxy: --bind-reason is for {FLAG}, which is not given",
              file=sys.stderr)
        return EXIT_LISTEN_ERROR
    server = ProxyServer(host=args.host, port=args.port,
                         exposure=Exposure(allow_non_loopback=allow, reason=reason))
    try:
        asyncio.run(_serve(server))
    except ListenError as exc:
        print(f"chaoslog proxy: {exc}", file=sys.stderr)
        return EXIT_LISTEN_ERROR
    return 0


async def _serve(server: ProxyServer) -> None:
    await server.start()
    print(f"chaoslog proxy: Toxiproxy API listening on {server.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m faults.proxy",
        description="Run the Toxiproxy-compatible proxy server until SIGINT/SIGTERM.",
    )
    _add_arguments(parser)
    return run(parser.parse_args(argv))
