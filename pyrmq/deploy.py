"""`pyrmq cluster`: a whole deployment on this machine with one command: a
name server and, for each broker group, a master and its slaves, each its
own process, each store under one directory. Ctrl-C (or SIGTERM) stops them
all, brokers first.

    pyrmq cluster --brokers 2 --replicas 2 --dir ./pyrmq-cluster

The command writes an ordinary broker.conf per broker (DIR/<name>.conf) and
starts `pyrmq broker -c` on it: to run the same across machines, copy those
files, set namesrvAddr and brokerIP1 to the real addresses, and start
`pyrmq namesrv` and `pyrmq broker -c FILE` on each machine (README, "High
availability"). Ports: the name server on --namesrv-port (9876); broker
process k (masters and slaves in order) on --base-port + 10 k (10911, 10921,
...), its replication port one above; --base-port 0 and --namesrv-port 0
take free ports (see the printed table)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import signal
import string
import time
from typing import Any

from pyrmq.remoting import RemotingClient, RemotingCommand, RequestCode
from pyrmq.testing.cluster import ServerProcess, free_ports

#: seconds between two looks at the processes while the cluster runs
WATCH_INTERVAL = 0.5
#: seconds the command waits for every group to replicate before it says
#: it is ready
REPLICATION_WAIT = 120.0


def add_arguments(sub: Any) -> None:
    cl = sub.add_parser(
        "cluster",
        help="run a name server and master/slave broker groups as processes (Ctrl-C stops)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cl.add_argument("--brokers", type=int, default=1, help="broker groups (broker-a, ...)")
    cl.add_argument("--replicas", type=int, default=2, help="brokers per group: 1 master + slaves")
    cl.add_argument("--dir", default="./pyrmq-cluster", help="stores, confs and logs go here")
    cl.add_argument("--host", default="127.0.0.1", help="address to listen on and advertise")
    cl.add_argument("--namesrv-port", type=int, default=9876)
    cl.add_argument("--base-port", type=int, default=10911)
    cl.add_argument(
        "--role",
        choices=("SYNC_MASTER", "ASYNC_MASTER"),
        default="SYNC_MASTER",
        help="brokerRole of the masters (SYNC_MASTER: a send is answered once a slave has it)",
    )
    cl.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH")
    cl.add_argument(
        "--controllers",
        type=int,
        default=0,
        help="name servers with an embedded controller each (3 or 5): automatic failover "
        "(RocketMQ 5 controller mode); 0: one name server, fixed master/slave roles",
    )
    cl.add_argument("-c", "--config", default=None, help="broker.conf keys added to every broker")
    cl.add_argument("--ready-file", default=None, help=argparse.SUPPRESS)


def _check(args: argparse.Namespace) -> None:
    if not 1 <= args.brokers <= 26:
        raise ValueError("--brokers must be within 1..26 (broker-a .. broker-z)")
    if not 1 <= args.replicas <= 9:
        raise ValueError("--replicas must be within 1..9 (one master and up to 8 slaves)")
    if args.controllers not in (0, 1, 3, 5):
        raise ValueError("--controllers must be 0, 1, 3 or 5 (3 survive the loss of one)")
    last = args.base_port + 10 * (args.brokers * args.replicas - 1) + 1
    if args.base_port and not 1 <= args.base_port <= last <= 65535:
        raise ValueError(f"--base-port {args.base_port}: the brokers need ports up to {last}")
    if not 0 <= args.namesrv_port <= 65535:
        raise ValueError(f"--namesrv-port {args.namesrv_port} is not a TCP port")


def _extra_conf(path: str | None) -> str:
    if not path:
        return ""
    try:
        return pathlib.Path(path).read_text()
    except OSError as e:
        raise ValueError(f"-c {path}: {e.strerror or e}") from None


def _namesrv_confs(args: argparse.Namespace, root: pathlib.Path) -> list[tuple[str, list[str]]]:
    """(name, `pyrmq namesrv` arguments) of each name server: one, or with
    --controllers n, n of them each with an embedded controller (a namesrv.conf
    with enableControllerInNamesrv=true; Raft on the port above its own)."""
    kv = ["--kv-config"]
    if not args.controllers:
        port = str(args.namesrv_port)
        path = str((root / "namesrv-kv.json").resolve())
        return [("namesrv", ["namesrv", "--host", args.host, "-p", port, *kv, path])]
    n = args.controllers
    if args.namesrv_port:
        ports = [args.namesrv_port + 10 * i for i in range(n)]
        raft = [p + 1 for p in ports]
    else:
        free = free_ports(2 * n)
        ports, raft = free[:n], free[n:]
    peers = ";".join(f"n{i}-{args.host}:{raft[i]}" for i in range(n))
    out = []
    for i in range(n):
        conf = root / f"namesrv-{i}.conf"
        conf.write_text(
            f"listenPort={ports[i]}\n"
            "enableControllerInNamesrv=true\n"
            "controllerDLegerGroup=pyrmq-controllers\n"
            f"controllerDLegerPeers={peers}\n"
            f"controllerDLegerSelfId=n{i}\n"
            f"controllerStorePath={(root / f'controller-{i}').resolve()}\n"
        )
        path = str((root / f"namesrv-{i}-kv.json").resolve())
        out.append(
            (f"namesrv-{i}", ["namesrv", "--host", args.host, "-c", str(conf.resolve()), *kv, path])
        )
    return out


def _broker_conf(
    args: argparse.Namespace, root: pathlib.Path, group: str, rid: int, k: int, namesrv: str
) -> str:
    port = args.base_port + 10 * k if args.base_port else 0
    conf = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": group,
        "brokerId": rid,
        "brokerRole": args.role if rid == 0 else "SLAVE",
        "flushDiskType": args.flush,
        "namesrvAddr": namesrv,
        "listenHost": args.host,
        "brokerIP1": args.host if args.host not in ("0.0.0.0", "") else "",
        "listenPort": port,
        "haListenPort": port + 1 if port else 0,
        "storePathRootDir": str((root / f"{group}-{rid}").resolve()),
    }
    if args.controllers:
        # the controllers choose the master; every broker starts alike
        conf.update(
            brokerId=0,
            brokerRole=args.role,
            enableControllerMode="true",
            controllerAddr=namesrv,
            allAckInSyncStateSet="true" if args.role == "SYNC_MASTER" else "false",
        )
    return "".join(f"{k}={v}\n" for k, v in conf.items() if v != "")


def run(args: argparse.Namespace) -> int:
    _check(args)
    extra = _extra_conf(args.config)
    root = pathlib.Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    namesrvs = [
        ServerProcess(name, argv, root, die_with_parent=True)
        for name, argv in _namesrv_confs(args, root)
    ]
    brokers: list[tuple[str, ServerProcess]] = []
    try:
        for ns in namesrvs:
            ns.launch()
        waiting = list(namesrvs)
        while waiting and not stopping:
            waiting = [ns for ns in waiting if not ns.poll_ready()]
            time.sleep(0.05)
        if stopping:
            return 130
        namesrv = ";".join(str(ns.info["namesrv"]) for ns in namesrvs)
        k = 0
        for g in range(args.brokers):
            group = f"broker-{string.ascii_lowercase[g]}"
            for rid in range(args.replicas):
                name = f"{group}-{rid}"
                conf = root / f"{name}.conf"
                conf.write_text(_broker_conf(args, root, group, rid, k, namesrv) + extra)
                proc = ServerProcess(
                    name, ["broker", "-c", str(conf.resolve())], root, die_with_parent=True
                )
                proc.launch()
                brokers.append((name, proc))
                k += 1
        pending = {name for name, _ in brokers}
        while pending and not stopping:
            pending = {n for n, p in brokers if n in pending and not p.poll_ready()}
            time.sleep(0.05)
        if stopping:
            return 130
        if args.replicas > 1 and not _replicating(args, brokers, lambda: stopping):
            print(
                f"warning: replication not complete after {REPLICATION_WAIT:.0f} s "
                "(see the broker logs); the cluster runs on",
                flush=True,
            )
        _print_table(namesrv, brokers, root)
        if args.ready_file:
            _write_ready(args.ready_file, namesrv, brokers)
        while not stopping:
            time.sleep(WATCH_INTERVAL)
            for name, p in brokers:
                if p.proc is not None and p.proc.poll() is not None:
                    print(f"{name} exited with {p.proc.returncode}; see {p.log_path}", flush=True)
                    p.proc = None
        return 0
    finally:
        print("stopping the cluster ...", flush=True)
        for _, p in reversed(brokers):
            p.stop()
        for ns in namesrvs:
            ns.stop()
        print("stopped", flush=True)


def _replicating(
    args: argparse.Namespace, brokers: list[tuple[str, ServerProcess]], stop: Any
) -> bool:
    """Wait until every group replicates (its master has all its slaves
    connected; with controllers, all of them in its SyncStateSet): before
    that a SYNC_MASTER answers SLAVE_NOT_AVAILABLE. False after
    REPLICATION_WAIT s."""

    async def info(client: RemotingClient, addr: str) -> dict[str, str]:
        resp = await client.invoke(
            addr, RemotingCommand(RequestCode.GET_BROKER_RUNTIME_INFO, {}), 3.0
        )
        return dict(json.loads(resp.body)["table"])

    async def ready(client: RemotingClient) -> bool:
        tables = [await info(client, str(p.info["broker"])) for _, p in brokers]
        if args.controllers:
            masters = [t for t in tables if t.get("controllerRole") == "MASTER"]
            return len(masters) == args.brokers and all(
                len(json.loads(t.get("syncStateSet", "[]"))) == args.replicas for t in masters
            )
        return all(
            int(t.get("haConnections", 0)) >= args.replicas - 1
            for t in tables
            if t.get("brokerRole") != "SLAVE"
        )

    async def main() -> bool:
        client = RemotingClient(name="pyrmq-cluster")
        try:
            deadline = time.monotonic() + REPLICATION_WAIT
            while time.monotonic() < deadline and not stop():
                try:
                    if await ready(client):
                        return True
                except Exception:  # a broker still starting
                    pass
                await asyncio.sleep(0.2)
            return False
        finally:
            await client.shutdown()

    return asyncio.run(main())


def _print_table(
    namesrv: str, brokers: list[tuple[str, ServerProcess]], root: pathlib.Path
) -> None:
    print(f"name servers {namesrv}   (clients: namesrv_addr={namesrv!r})", flush=True)
    for name, p in brokers:
        print(f"{name:<12} {p.info.get('broker')}   conf {root / (name + '.conf')}", flush=True)
    print(f"logs and stores under {root.resolve()}; Ctrl-C stops everything", flush=True)


def _write_ready(path: str, namesrv: str, brokers: list[tuple[str, ServerProcess]]) -> None:
    doc: dict[str, Any] = {
        "namesrv": namesrv,
        "brokers": {n: p.info.get("broker") for n, p in brokers},
        "pid": os.getpid(),
    }
    tmp = f"{path}.tmp"
    pathlib.Path(tmp).write_text(json.dumps(doc))
    os.replace(tmp, path)
