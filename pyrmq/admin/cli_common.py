"""What every `pyrmq admin` command shares: mqadmin-style tables and times,
argument helpers (mqadmin's short options), and Output, what a command
returns (`data` for --json, `text` otherwise)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pyrmq.admin.client import AdminClient
from pyrmq.common.message import MessageExt

#: mqadmin's time format for -s/-e (UtilAll.YYYY_MM_DD_HH_MM_SS_SSS, local time)
JAVA_TIME_FORMAT = "%Y-%m-%d#%H:%M:%S:%f"
BODY_IN_TABLE = 64


def default_namesrv() -> str:
    return os.environ.get("NAMESRV_ADDR") or "127.0.0.1:9876"


# -- formatting ---------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, mqadmin style (#Header)."""
    cells = [[f"#{h}" for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def fmt_time(ms: int) -> str:
    """Epoch milliseconds as local time; '-' for 0 (never)."""
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def short_body(body: bytes, limit: int = BODY_IN_TABLE) -> str:
    try:
        text = body.decode()
    except UnicodeDecodeError:
        return f"<{len(body)} bytes>"
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def message_detail(m: MessageExt) -> str:
    """One message as mqadmin's queryMsgById prints it."""
    try:
        body = m.body.decode()
    except UnicodeDecodeError:
        body = f"<{len(m.body)} bytes, not UTF-8: use --json for base64>"
    rows = [
        ("OffsetID", m.offset_msg_id),
        ("MsgId", m.msg_id),
        ("Topic", m.topic),
        ("Tags", f"[{m.tags or ''}]"),
        ("Keys", f"[{' '.join(m.keys)}]"),
        ("Queue ID", m.queue_id),
        ("Queue Offset", m.queue_offset),
        ("CommitLog Offset", m.commit_log_offset),
        ("Reconsume Times", m.reconsume_times),
        ("Born Timestamp", fmt_time(m.born_timestamp)),
        ("Store Timestamp", fmt_time(m.store_timestamp)),
        ("Born Host", m.born_host),
        ("Store Host", m.store_host),
        ("System Flag", m.sys_flag),
        ("Properties", json.dumps(m.properties, ensure_ascii=False)),
        ("Message Body", body),
    ]
    return "\n".join(f"{k + ':':<20} {v}" for k, v in rows)


def parse_timestamp(text: str) -> int:
    """-s/-e values: epoch ms, 'now', or yyyy-MM-dd#HH:mm:ss:SSS (local time)."""
    t = text.strip()
    if t.lower() == "now":
        return int(datetime.datetime.now().timestamp() * 1000)
    if t.lstrip("-").isdigit():
        return int(t)
    for parse in (
        lambda s: datetime.datetime.strptime(s, JAVA_TIME_FORMAT),
        datetime.datetime.fromisoformat,
    ):
        try:
            return int(parse(t).timestamp() * 1000)
        except ValueError:
            continue
    raise argparse.ArgumentTypeError(
        f"timestamp {text!r} is neither epoch milliseconds, 'now', nor yyyy-MM-dd#HH:mm:ss:SSS"
    )


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def perm_text(perm: int) -> str:
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-") + ("X" if perm & 1 else "-")


@dataclasses.dataclass(slots=True)
class Output:
    """What a command shows: `data` for --json, `text` otherwise."""

    data: Any
    text: str


# -- commands --------------------------------------------------------------------------------

Run = Callable[[AdminClient, argparse.Namespace], Awaitable[Output]]


def opt(p: argparse._ActionsContainer, short: str, *longs: str, **kw: Any) -> None:
    p.add_argument(short, *(f"--{n}" for n in longs), **kw)


def topic_opt(p: argparse.ArgumentParser, required: bool = True) -> None:
    opt(p, "-t", "topic", required=required, help="topic name")


def group_opt(p: argparse.ArgumentParser) -> None:
    opt(p, "-g", "consumerGroup", "group", dest="group", required=True, help="consumer group")


def positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return n


def no_args(p: argparse.ArgumentParser) -> None:
    pass


def setup_topic_only(p: argparse.ArgumentParser) -> None:
    topic_opt(p)


Setup = Callable[[argparse.ArgumentParser], None]


def where_opt(p: argparse.ArgumentParser, required: bool = False) -> None:
    """-b brokerAddr | -c clusterName (every master of the cluster)."""
    where = p.add_mutually_exclusive_group(required=required)
    opt(where, "-b", "brokerAddr", "broker-addr", dest="broker_addr", help="one broker (ip:port)")
    opt(where, "-c", "clusterName", "cluster", dest="cluster", help="every master of a cluster")
