"""Options of the `rocketmq` data source and the UDF producers: parsed and
checked once, on the driver, so a bad option fails the query at planning
with a message that names the option and the forms it accepts.

Names follow Spark's Kafka source where the idea is the same (Spark passes
them case-insensitively):

    nameServer            host:port[;host:port]            (required)
    topic                 one topic, or several separated by commas
    topicPattern          a Python regular expression over the topic list
    assign                JSON {"topic": [queueId, ...]} or
                          {"topic": {"brokerName": [queueId, ...]}}
    subExpression         tag filter: * or TagA || TagB      (default *),
                          or a SQL92 expression with subExpressionType
    subExpressionType     TAG | SQL92 (RocketMQ's expressionType; SQL92
                          needs enablePropertyFilter=true on the brokers)
    startingOffsets       earliest | latest | JSON            (read)
    endingOffsets         latest | JSON                        (batch read)
    startingTimestamp     ms since the epoch; overrides startingOffsets
    maxOffsetsPerTrigger  rows per micro-batch at most         (stream read)
    failOnDataLoss        true | false                         (default true)
    consumerGroup         group named in pulls and offset commits
    commitOffsetsToBroker true | false: streaming commits also store
                          offsets in the broker (for lag monitoring)
    includeProperties     true | false: fill the `properties` column
    producerGroup         producer group of the writers
    sendTimeoutMs         deadline of each send, retries included

Offsets JSON (Kafka's form, a queue named brokerName:queueId; -2 is
earliest, -1 latest):  {"TopicA": {"broker-a:0": 23, "broker-a:1": -2}}.
Queues a JSON leaves out start at earliest and end at latest."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyrmq.common.errors import SubscriptionParseFailedError
from pyrmq.common.subscription import SubscriptionData

EARLIEST = -2
LATEST = -1

DEFAULT_CONSUMER_GROUP = "spark-rocketmq-reader"
DEFAULT_PRODUCER_GROUP = "spark-rocketmq-writer"

#: queue key inside an offsets JSON
QueueKey = tuple[str, str, int]  # (topic, brokerName, queueId)


class OptionError(ValueError):
    """A data source or UDF option is missing or malformed; the message
    names the option and the forms it accepts."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    # Spark hands options over case-insensitively (CaseInsensitiveDict);
    # plain dicts from the UDF API are matched the same way here
    if name in options:
        return options[name]
    low = name.lower()
    for k, v in options.items():
        if k.lower() == low:
            return v
    return None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    v = str(raw).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}={raw!r}: expected true or false")


def _int(options: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = _get(options, name)
    if raw is None or str(raw).strip() == "":
        return None
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {name}={raw!r}: expected an integer") from None
    if v < minimum:
        raise OptionError(f"option {name}={raw!r}: must be >= {minimum}")
    return v


def parse_offsets(name: str, raw: str, *, allow_earliest: bool = True) -> str | dict[QueueKey, int]:
    """'earliest', 'latest', or {(topic, broker, queueId): offset} from the
    JSON form; OptionError naming `name` otherwise."""
    forms = (
        "'earliest', 'latest' or JSON such as "
        '{"TopicA": {"broker-a:0": 23, "broker-a:1": -2}} (-2 earliest, -1 latest)'
    )
    if not allow_earliest:
        forms = forms.replace("'earliest', ", "")
    v = raw.strip()
    if v.lower() == "earliest" and allow_earliest:
        return "earliest"
    if v.lower() == "latest":
        return "latest"
    try:
        doc = json.loads(v)
    except ValueError:
        raise OptionError(f"option {name}={raw!r} is not understood; use {forms}") from None
    if not isinstance(doc, dict):
        raise OptionError(f"option {name}={raw!r} is not understood; use {forms}")
    out: dict[QueueKey, int] = {}
    for topic, queues in doc.items():
        if not isinstance(queues, dict):
            raise OptionError(
                f"option {name}: the value for topic {topic!r} must be an object of "
                f'"brokerName:queueId": offset; use {forms}'
            )
        for qkey, off in queues.items():
            broker, sep, qid = str(qkey).rpartition(":")
            if not sep or not broker or not qid.isdigit():
                raise OptionError(
                    f"option {name}: queue {qkey!r} of topic {topic!r} must be written "
                    f'"brokerName:queueId" (such as "broker-a:0"); use {forms}'
                )
            if not isinstance(off, int) or isinstance(off, bool) or off < -2:
                raise OptionError(
                    f"option {name}: offset {off!r} of {topic}/{qkey} must be an integer >= 0, "
                    "-2 (earliest) or -1 (latest)"
                )
            if off == EARLIEST and not allow_earliest:
                raise OptionError(f"option {name}: -2 (earliest) cannot end a read")
            out[(str(topic), broker, int(qid))] = off
    return out


@dataclass(frozen=True)
class SourceOptions:
    """Checked options of a read (batch or streaming)."""

    name_server: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    assign: dict[str, Any] | None = None
    sub_expression: str = "*"
    starting_offsets: str | dict[QueueKey, int] = "earliest"
    ending_offsets: str | dict[QueueKey, int] = "latest"
    starting_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    consumer_group: str = DEFAULT_CONSUMER_GROUP
    commit_offsets_to_broker: bool = False
    include_properties: bool = False
    tag_set: frozenset[str] = field(default_factory=frozenset)
    sub_expression_type: str = "TAG"


@dataclass(frozen=True)
class SinkOptions:
    """Checked options of a write (batch, streaming or a UDF producer)."""

    name_server: str
    topic: str | None = None
    producer_group: str = DEFAULT_PRODUCER_GROUP
    send_timeout_ms: int = 3000
    fail_fast: bool = True


def name_server(options: Mapping[str, str]) -> str:
    ns = _get(options, "nameServer")
    if not ns or not ns.strip():
        raise OptionError(
            "option nameServer is required: the name server address as host:port "
            "(several separated by ';'), such as .option('nameServer', '127.0.0.1:9876')"
        )
    for part in ns.split(";"):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise OptionError(f"option nameServer={ns!r}: each address must be host:port")
    return ns.strip()


def tags_of(expression: str, expression_type: str = "TAG") -> frozenset[str]:
    """The tags of a TAG expression ('*' → empty: every tag), parsed as the
    client and broker parse subscriptions; a SQL92 expression is checked
    (the brokers filter by it) and has no tags."""
    try:
        return frozenset(SubscriptionData.parse("", expression, 0, expression_type).tags_set)
    except SubscriptionParseFailedError as e:
        raise OptionError(f"option subExpression={expression!r}: {e}") from None


def source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    ns = name_server(options)
    topic = _get(options, "topic")
    pattern = _get(options, "topicPattern")
    assign_raw = _get(options, "assign")
    given = [
        n for n, v in (("topic", topic), ("topicPattern", pattern), ("assign", assign_raw)) if v
    ]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options topic, topicPattern or assign must be set "
            f"(got {', '.join(given) or 'none'}): topic='TopicA' or 'TopicA,TopicB'; "
            "topicPattern='Orders.*' (a regular expression); "
            'assign=\'{"TopicA": [0, 1]}\' or \'{"TopicA": {"broker-a": [0, 1]}}\''
        )
    topics: tuple[str, ...] = ()
    assign: dict[str, Any] | None = None
    if topic:
        topics = tuple(t.strip() for t in topic.split(",") if t.strip())
        if not topics:
            raise OptionError(f"option topic={topic!r} names no topic")
    if pattern:
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(
                f"option topicPattern={pattern!r} is not a regular expression: {e}"
            ) from None
    if assign_raw:
        try:
            assign = json.loads(assign_raw)
        except ValueError:
            assign = None
        ok = isinstance(assign, dict) and all(
            (isinstance(v, list) and all(isinstance(q, int) for q in v))
            or (
                isinstance(v, dict)
                and all(
                    isinstance(q, list) and all(isinstance(i, int) for i in q) for q in v.values()
                )
            )
            for v in assign.values()
        )
        if not ok:
            raise OptionError(
                f"option assign={assign_raw!r} is not understood; use "
                '{"TopicA": [0, 1]} (queue ids on every broker) or '
                '{"TopicA": {"broker-a": [0, 1]}}'
            )
    start_raw = _get(options, "startingOffsets")
    starting: str | dict[QueueKey, int] = "latest" if streaming else "earliest"
    if start_raw is not None:
        starting = parse_offsets("startingOffsets", start_raw)
    ending: str | dict[QueueKey, int] = "latest"
    end_raw = _get(options, "endingOffsets")
    if end_raw is not None:
        if streaming:
            raise OptionError("option endingOffsets applies to batch reads only (spark.read)")
        ending = parse_offsets("endingOffsets", end_raw, allow_earliest=False)
    if not streaming and starting == "latest":
        raise OptionError(
            "option startingOffsets='latest' would read nothing in a batch query; "
            "use 'earliest', a JSON of offsets, or startingTimestamp"
        )
    max_per_trigger = _int(options, "maxOffsetsPerTrigger", 1)
    if max_per_trigger is not None and not streaming:
        raise OptionError("option maxOffsetsPerTrigger applies to streaming reads only")
    sub = _get(options, "subExpression") or "*"
    sub_type = (_get(options, "subExpressionType") or "TAG").upper()
    if sub_type not in ("TAG", "SQL92"):
        raise OptionError(f"option subExpressionType={sub_type!r}: use TAG or SQL92")
    group = _get(options, "consumerGroup") or DEFAULT_CONSUMER_GROUP
    if not re.fullmatch(r"[%|a-zA-Z0-9_-]{1,255}", group):
        raise OptionError(
            f"option consumerGroup={group!r}: use 1..255 of letters, digits, '_', '-', '%', '|'"
        )
    return SourceOptions(
        name_server=ns,
        topics=topics,
        topic_pattern=pattern or None,
        assign=assign,
        sub_expression=sub,
        starting_offsets=starting,
        ending_offsets=ending,
        starting_timestamp=_int(options, "startingTimestamp", 0),
        max_offsets_per_trigger=max_per_trigger,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        consumer_group=group,
        commit_offsets_to_broker=_bool(options, "commitOffsetsToBroker", False),
        include_properties=_bool(options, "includeProperties", False),
        tag_set=tags_of(sub, sub_type),
        sub_expression_type=sub_type,
    )


def sink_options(options: Mapping[str, str], *, fail_fast_default: bool = True) -> SinkOptions:
    ns = name_server(options)
    topic = _get(options, "topic")
    if topic is not None and not topic.strip():
        raise OptionError("option topic is empty; name the topic rows without a topic go to")
    group = _get(options, "producerGroup") or DEFAULT_PRODUCER_GROUP
    if not re.fullmatch(r"[%|a-zA-Z0-9_-]{1,255}", group):
        raise OptionError(
            f"option producerGroup={group!r}: use 1..255 of letters, digits, '_', '-', '%', '|'"
        )
    timeout = _int(options, "sendTimeoutMs", 1)
    return SinkOptions(
        name_server=ns,
        topic=topic.strip() if topic else None,
        producer_group=group,
        send_timeout_ms=timeout if timeout is not None else 3000,
        fail_fast=_bool(options, "failFast", fail_fast_default),
    )
