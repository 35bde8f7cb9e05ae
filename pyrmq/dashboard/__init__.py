"""`pyrmq dashboard`: a web dashboard for a pyrmq or RocketMQ 4.x cluster,
in the manner of rocketmq-dashboard.

    pyrmq dashboard -n 127.0.0.1:9876            # http://127.0.0.1:8082/

Pages: the cluster (brokers, roles, versions, runtime info, put throughput
chart), topics (create/update, delete, route, per-queue offsets, send a test
message, TPS chart), consumer groups (members, per-queue lag, lag chart,
reset offsets by time, skip the backlog), messages (by topic and time range,
by key, by message id; body and properties; resend to a group or to the
original topic) and dead-letter queues (%DLQ%<group>: browse, resend).

It is an admin client like `pyrmq admin`: one AdminClient shared by every
page (service.py bounds and caches its calls), never a server import.

The web stack, and why: Starlette (a small ASGI toolkit: routing, requests,
responses, static files; maintained by the encode team, pure Python) with
Jinja2 templates (autoescaping HTML: message bodies are untrusted text) and
uvicorn to serve it on asyncio, the loop AdminClient already runs on, so a
page awaits the cluster directly, with no thread bridge. No frontend build:
the live charts are a few dozen lines of plain JavaScript drawing SVG
(static/dashboard.js). They are an optional extra, `pyrmq[dashboard]`."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

#: rocketmq-dashboard's port
DEFAULT_PORT = 8082
#: the modules of the `dashboard` extra
_WEB_STACK = ("starlette", "jinja2", "uvicorn")


def add_arguments(sub: Any) -> None:
    """Register `dashboard` on the `pyrmq` subparsers."""
    from pyrmq.admin.cli import add_common

    p = sub.add_parser(
        "dashboard",
        help="a web dashboard (like rocketmq-dashboard) on port 8082",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to listen on ({DEFAULT_PORT}; 0: any free port, printed at start)",
    )


def missing_web_stack() -> list[str]:
    return [m for m in _WEB_STACK if importlib.util.find_spec(m) is None]


def main(args: argparse.Namespace) -> int:
    missing = missing_web_stack()
    if missing:
        print(
            f"error: the dashboard needs {', '.join(missing)}: pip install 'pyrmq[dashboard]'",
            file=sys.stderr,
        )
        return 1
    from pyrmq.dashboard.server import run

    return run(args)
