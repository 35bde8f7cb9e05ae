"""Serving the dashboard: one AdminClient, one uvicorn server, one loop.

The listening socket is bound here (not by uvicorn) so `--port 0` works:
the address actually bound is printed as the first line on stdout,
`pyrmq dashboard: http://HOST:PORT/`. SIGINT/SIGTERM stop uvicorn, which
lets open requests finish; the AdminClient is shut down after it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import sys

import uvicorn

from pyrmq.admin.cli import error_line, tls_kwargs
from pyrmq.admin.client import AdminClient
from pyrmq.dashboard.app import create_app
from pyrmq.dashboard.service import DashboardService


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.set_inheritable(True)
    return sock


async def serve(args: argparse.Namespace) -> None:
    if not 0 <= args.port < 65536:
        raise ValueError(f"--port must be 0..65535, not {args.port}")
    if args.timeout <= 0:
        raise ValueError("--timeout must be > 0")
    sock = _listen(args.host, args.port)
    admin = AdminClient(
        args.namesrv_addr,
        timeout=args.timeout,
        access_key=args.access_key,
        secret_key=args.secret_key,
        **tls_kwargs(args),
    )
    service = DashboardService(admin)
    try:
        app = create_app(service, args.namesrv_addr)
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=5
        )
        server = uvicorn.Server(config)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"pyrmq dashboard: http://{shown}:{port}/ (name servers {args.namesrv_addr})")
        sys.stdout.flush()
        await server.serve(sockets=[sock])
    finally:
        sock.close()
        await service.shutdown()


def run(args: argparse.Namespace) -> int:
    # a server's log: warnings of the client (a broker gone) and the
    # tracebacks of requests that failed unexpectedly, on stderr
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        return 0
    except Exception as e:
        print(error_line(e), file=sys.stderr)
        return 1
    return 0
