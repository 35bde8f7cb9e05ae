"""Peers measured beside pyrmq on the same machine in the same run, each
with its usual Python client and a comparable durability setting:

==================  ==========================================  ===========
system              server (Debian package) and setting          pyrmq twin
==================  ==========================================  ===========
``nats``            nats-server -js, file storage                ASYNC_FLUSH
``redis-everysec``  redis-server, AOF ``appendfsync everysec``   ASYNC_FLUSH
``redis-always``    redis-server, AOF ``appendfsync always``     SYNC_FLUSH
``rabbitmq``        rabbitmq-server + rabbitmq_stream plugin     ASYNC_FLUSH
==================  ==========================================  ===========

``run_peer(name, root, budget)`` starts the server (bench.peers._servers),
runs bench._e2e.run_cases with the peer's adapter in this process, stops the
server and returns ``{"system", "server", "client", "durability", "rows"}``
(or ``{"system", "skipped": reason}`` when the server or the client library
is missing). One command for one peer:

    python -m bench.peers redis-always [--quick] [--sizes 128] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench._e2e import Budget, run_cases
from bench.peers import _servers

#: name -> (server kind, client module, durability, pyrmq flush type it compares with)
PEERS: dict[str, tuple[str, str, str, str]] = {
    "nats": (
        "nats",
        "nats",
        "JetStream file storage (fsync every 2 min, the 2.9 default)",
        "ASYNC_FLUSH",
    ),
    "redis-everysec": ("redis", "redis", "AOF, appendfsync everysec", "ASYNC_FLUSH"),
    "redis-always": ("redis", "redis", "AOF, appendfsync always", "SYNC_FLUSH"),
    "rabbitmq": (
        "rabbitmq",
        "rstream",
        "stream (single node; confirmed once in the log, no fsync)",
        "ASYNC_FLUSH",
    ),
}


def missing(name: str) -> str | None:
    """Why peer `name` cannot run here (server binary or client library
    missing), or None."""
    kind, module, _, _ = PEERS[name]
    why = _servers.missing_binary(kind)
    if why:
        return why
    if importlib.util.find_spec(module) is None:
        dist = {"nats": "nats-py", "redis": "redis", "rstream": "rstream"}[module]
        return f"Python package {dist} not installed (pip install '.[bench]')"
    return None


@contextlib.contextmanager
def _server(name: str, root: str) -> Iterator[_servers.PeerServer]:
    if name == "nats":
        with _servers.nats_server(root) as s:
            yield s
    elif name.startswith("redis-"):
        with _servers.redis_server(root, name.split("-", 1)[1]) as s:
            yield s
    elif name == "rabbitmq":
        with _servers.rabbitmq_server(root) as s:
            yield s
    else:
        raise ValueError(f"unknown peer {name!r}")


async def _adapter(name: str, srv: _servers.PeerServer) -> Any:
    if name == "nats":
        from bench.peers.nats_js import open_adapter

        return await open_adapter(srv.host, srv.port)
    if name.startswith("redis-"):
        from bench.peers.redis_streams import RedisAdapter

        return await RedisAdapter.connect(srv.host, srv.port)
    from bench.peers.rabbitmq_streams import RabbitAdapter

    return await RabbitAdapter.connect(srv.host, srv.port)


def run_peer(
    name: str, root: str, budget: Budget, log: Callable[[str], None] = lambda _m: None
) -> dict[str, Any]:
    """Start peer `name`'s server under root, run every case, stop it."""
    _, _, durability, twin = PEERS[name]
    why = missing(name)
    if why:
        log(f"{name}: skipped ({why})")
        return {"system": name, "skipped": why, "durability": durability, "compare_with": twin}
    t0 = time.perf_counter()
    with _server(name, root) as srv:
        log(
            f"{name}: {srv.version}, pid {srv.pid}, port {srv.port} "
            f"(ready in {time.perf_counter() - t0:.1f} s)"
        )

        async def main() -> tuple[str, list[dict[str, Any]]]:
            a = await _adapter(name, srv)
            try:
                return a.client, await run_cases(a, budget, srv.cpu_s, name, log)
            finally:
                await a.close()

        client, rows = asyncio.run(main())
    return {
        "system": name,
        "server": srv.version,
        "client": client,
        "durability": durability,
        "compare_with": twin,
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("peer", choices=sorted(PEERS))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", type=lambda s: tuple(int(x) for x in s.split(",")))
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    budget = Budget.make(args.quick, args.sizes)
    doc = run_peer(args.peer, args.dir, budget, lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(doc, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0
