"""Imports flow one way (STYLE.md section 1): common <- remoting <- {namesrv,
broker, client}; rmqcore <- store <- broker. An arrow pointing the wrong way
fails here."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent

# package -> the pyrmq packages it may import (besides itself)
ALLOWED = {
    "pyrmq.common": set(),
    # ACL 1.0 (STYLE.md section 10): signing for clients, checks for servers
    "pyrmq.acl": {"pyrmq.common"},
    "pyrmq.storage": {"pyrmq.common"},
    "pyrmq.remoting": {"pyrmq.common"},
    # metrics (STYLE.md section 10): the servers hand it their numbers
    "pyrmq.metrics": {"pyrmq.common"},
    "pyrmq.namesrv": {"pyrmq.common", "pyrmq.remoting", "pyrmq.metrics"},
    # a broker in controller mode talks to the controllers (their client)
    "pyrmq.broker": {
        "pyrmq.common",
        "pyrmq.remoting",
        "pyrmq.storage",
        "pyrmq.controller",
        "pyrmq.acl",
        "pyrmq.metrics",
    },
    "pyrmq.client": {"pyrmq.common", "pyrmq.remoting", "pyrmq.acl"},
    # the controller: remoting, common and pysyncobj; never storage or broker
    "pyrmq.controller": {"pyrmq.common", "pyrmq.remoting"},
    "pyrmq.producer": {"pyrmq.common", "pyrmq.remoting", "pyrmq.client", "pyrmq.acl"},
    # a tracing consumer writes its trace records with a Producer (as Java's)
    "pyrmq.consumer": {"pyrmq.common", "pyrmq.remoting", "pyrmq.client", "pyrmq.producer"},
    # helpers that start servers, and ask them how they are (a broker
    # group's roles) the way a client would
    "pyrmq.testing": {
        "pyrmq.common",
        "pyrmq.namesrv",
        "pyrmq.broker",
        "pyrmq.storage",
        "pyrmq.remoting",
        "pyrmq.client",
    },
    # RocketMQ 5's proxy (STYLE.md section 10): protocol adapters over the
    # brokers' own processors, in the broker or as a client of a cluster's
    # (its requests made with the client's MQClientAPI); the broker never
    # imports it
    "pyrmq.proxy": {
        "pyrmq.common",
        "pyrmq.remoting",
        "pyrmq.broker",
        "pyrmq.acl",
        "pyrmq.client",
    },
    # administration is a client program (STYLE.md section 10): no server imports it
    "pyrmq.admin": {
        "pyrmq.acl",
        "pyrmq.common",
        "pyrmq.remoting",
        "pyrmq.client",
        "pyrmq.producer",
        "pyrmq.consumer",
    },
    # the benchmark tool is a client program: the client and the admin CLI
    "pyrmq.benchmark": {
        "pyrmq.acl",
        "pyrmq.common",
        "pyrmq.client",
        "pyrmq.producer",
        "pyrmq.consumer",
        "pyrmq.admin",
    },
}


def _imports(path: pathlib.Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def _package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "pyrmq" and len(parts) > 1 else parts[0]


def test_pyrmq_packages_import_only_downward():
    bad = []
    for pkg, allowed in ALLOWED.items():
        folder = ROOT / pkg.replace(".", "/")
        for path in folder.rglob("*.py") if folder.exists() else []:
            for mod in _imports(path):
                target = _package_of(mod)
                if target.startswith("pyrmq.") and target != pkg and target not in allowed:
                    bad.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert bad == []


def test_rmqcore_and_spark_point_the_right_way():
    bad = []
    for path in (ROOT / "rmqcore").glob("*.py*"):
        for mod in _imports(path) if path.suffix == ".py" else set():
            if mod.startswith("pyrmq") and not mod.startswith("pyrmq.common"):
                bad.append(f"{path.name} imports {mod}")
    for path in (ROOT / "pyrmq").rglob("*.py"):
        if any(m.startswith("spark_integration") for m in _imports(path)):
            bad.append(f"{path.relative_to(ROOT)} imports spark_integration")
    assert bad == []
