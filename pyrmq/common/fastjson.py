"""JSON as RocketMQ's Java side writes it with fastjson, where a map keyed by
an object (ConsumeStats.offsetTable, TopicStatsTable.offsetTable,
ResetOffsetBody.offsetTable: `Map<MessageQueue, ...>`) is written with the
key object as is:

    {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":3}}}

That is not JSON (an object key must be a string), but it is what mqadmin
and rocketmq-dashboard parse, so the broker writes it (`dumps` with an
ObjectKeyMap) and pyrmq's admin client reads it (`loads`, which also reads
plain JSON). `loads` gives an object whose keys are not all strings as a
dict keyed by the key's canonical JSON text (sorted keys, no spaces):
`json.loads(key)` gives the key object back."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"
#: a body nested deeper than this is refused (a malformed or hostile body
#: must not exhaust the stack)
_MAX_DEPTH = 64


class ObjectKeyMap:
    """A map whose keys are JSON objects: (key, value) pairs, written in order."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[tuple[dict[str, Any], Any]]) -> None:
        self.items = list(items)


def dumps(obj: Any) -> str:
    """Compact JSON, with ObjectKeyMap written the fastjson way."""
    if isinstance(obj, ObjectKeyMap):
        return "{" + ",".join(f"{dumps(k)}:{dumps(v)}" for k, v in obj.items) + "}"
    if isinstance(obj, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{dumps(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list | tuple | set | frozenset):
        return "[" + ",".join(dumps(v) for v in obj) + "]"
    return json.dumps(obj, separators=(",", ":"))


def key_text(key: Any) -> str:
    """The canonical text `loads` keys an object-keyed map by."""
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def loads(text: str | bytes) -> Any:
    """Parse JSON or fastjson's object-keyed maps; ValueError when neither."""
    s = text.decode() if isinstance(text, bytes) else text
    value, i = _value(s, _skip(s, 0), 0)
    if _skip(s, i) != len(s):
        raise ValueError(f"extra data at {i}")
    return value


def _skip(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def _value(s: str, i: int, depth: int) -> tuple[Any, int]:
    if depth > _MAX_DEPTH:
        raise ValueError("nested too deep")
    if i >= len(s):
        raise ValueError("unexpected end")
    c = s[i]
    if c == "{":
        return _object(s, i + 1, depth + 1)
    if c == "[":
        return _array(s, i + 1, depth + 1)
    try:
        return _DECODER.raw_decode(s, i)
    except json.JSONDecodeError as e:
        raise ValueError(str(e)) from None


def _object(s: str, i: int, depth: int) -> tuple[Any, int]:
    out: dict[str, Any] = {}
    i = _skip(s, i)
    if i < len(s) and s[i] == "}":
        return out, i + 1
    while True:
        key, i = _value(s, _skip(s, i), depth)
        i = _skip(s, i)
        if i >= len(s) or s[i] != ":":
            raise ValueError(f"expected ':' at {i}")
        value, i = _value(s, _skip(s, i + 1), depth)
        out[key if isinstance(key, str) else key_text(key)] = value
        i = _skip(s, i)
        if i < len(s) and s[i] == ",":
            i += 1
            continue
        if i < len(s) and s[i] == "}":
            return out, i + 1
        raise ValueError(f"expected ',' or '}}' at {i}")


def _array(s: str, i: int, depth: int) -> tuple[Any, int]:
    out: list[Any] = []
    i = _skip(s, i)
    if i < len(s) and s[i] == "]":
        return out, i + 1
    while True:
        value, i = _value(s, _skip(s, i), depth)
        out.append(value)
        i = _skip(s, i)
        if i < len(s) and s[i] == ",":
            i += 1
            continue
        if i < len(s) and s[i] == "]":
            return out, i + 1
        raise ValueError(f"expected ',' or ']' at {i}")


def mq_key(topic: str, broker_name: str, queue_id: int) -> dict[str, Any]:
    """A MessageQueue as fastjson writes it (fields in name order)."""
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


__all__ = ["ObjectKeyMap", "dumps", "key_text", "loads", "mq_key"]
