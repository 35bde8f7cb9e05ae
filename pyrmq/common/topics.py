"""Topic names RocketMQ gives a meaning to (Java TopicValidator and
MixAll): the auto-create template, the delay and retry/DLQ topics, and the
topics producers may not send to. Shared by the broker and the clients."""

from __future__ import annotations

#: the template auto-created topics copy (MixAll.AUTO_CREATE_TOPIC_KEY_TOPIC)
TBW102 = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
#: transactions: half messages, their op records, the ones given up on
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: the group whose consumer offsets hold the transaction checker's progress
TRANS_SYS_GROUP = "CID_RMQ_SYS_TRANS"
#: topics producers may not send to (Java TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET)
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_system_topic(topic: str) -> bool:
    """A topic of RocketMQ's own (no user data to read): the template, the
    delay, transaction and self-test topics, and the retry / DLQ topics of
    consumer groups."""
    return (
        topic == TBW102
        or topic in NOT_ALLOWED_SEND_TOPICS
        or topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
        or topic.lower().startswith(SYSTEM_TOPIC_PREFIX)
    )


#: consumer groups of RocketMQ's own that its brokers create at start
#: (MixAll: tools, filter server, self test, ONS proxy and API groups, the
#: transaction checker's), and the prefixes its system groups share
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_RMQ_SYS_TRANS",
)
SYSTEM_GROUP_PREFIXES = ("CID_RMQ_SYS_", "CID_SYS_RMQ_", "CID_ONSAPI_")


def is_system_group(group: str) -> bool:
    """A consumer group of RocketMQ's own (SYSTEM_GROUPS and its prefixes)."""
    return group in SYSTEM_GROUPS or group.startswith(SYSTEM_GROUP_PREFIXES)
