"""SubscriptionData: a parsed subscription expression, the same on both
sides. A TAG expression ("*" or "TagA || TagB", FilterAPI.buildSubscriptionData):
the broker filters ConsumeQueue units by `code_set` (tag hash codes), the
client re-checks the exact tag strings in `tags_set`. A SQL92 expression
(MessageSelector.bySql, expressionType "SQL92"): compiled once into `sql`
(pyrmq.common.filter), which the broker evaluates on each message's
properties and the client checks again.

MessageSelector is what consumers' ``subscribe`` takes besides a plain tag
expression: ``MessageSelector.by_tag("TagA || TagB")``,
``MessageSelector.by_sql("a > 5 AND region = 'eu'")``."""

from __future__ import annotations

import dataclasses
from typing import Any

import rmqcore
from pyrmq.common.errors import SubscriptionParseFailedError
from pyrmq.common.filter import Sql92Error, Sql92Filter, compile_sql92

SUB_ALL = "*"
#: expressionType values (RocketMQ's ExpressionType)
TAG = "TAG"
SQL92 = "SQL92"


@dataclasses.dataclass(frozen=True, slots=True)
class MessageSelector:
    """What a consumer subscribes with: a TAG or a SQL92 expression."""

    expression_type: str
    expression: str

    @classmethod
    def by_tag(cls, expression: str = SUB_ALL) -> MessageSelector:
        return cls(TAG, expression)

    @classmethod
    def by_sql(cls, expression: str) -> MessageSelector:
        return cls(SQL92, expression)


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionData:
    """code_set is empty for "*" (all tags)."""

    topic: str
    sub_string: str
    tags_set: tuple[str, ...]
    code_set: frozenset[int]
    sub_version: int = 0
    expression_type: str = TAG
    #: the compiled expression of a SQL92 subscription
    sql: Sql92Filter | None = None

    @property
    def matches_all(self) -> bool:
        return not self.tags_set and self.sql is None

    def matches(self, tags: str | None) -> bool:
        """Whether a message with these tags is wanted (exact string check;
        a SQL92 subscription is checked by `accepts`)."""
        return not self.tags_set or (tags is not None and tags in self.tags_set)

    def accepts(self, properties: dict[str, str]) -> bool:
        """Whether a message with these properties is wanted."""
        if self.sql is not None:
            return self.sql.matches(properties)
        return self.matches(properties.get("TAGS"))

    @classmethod
    def parse(
        cls,
        topic: str,
        expression: str | None,
        sub_version: int = 0,
        expression_type: str | None = TAG,
    ) -> SubscriptionData:
        """Raises SubscriptionParseFailedError (a BrokerError, code 23) for an
        expression that names no tag, a SQL92 expression that does not
        parse, or an unknown expression type."""
        kind = (expression_type or TAG).upper()
        if kind == SQL92:
            try:
                sql = compile_sql92(expression or "")
            except Sql92Error as e:
                raise SubscriptionParseFailedError(
                    f"SQL92 subscription {expression!r} of {topic} does not parse: {e}"
                ) from None
            return cls(topic, sql.expression, (), frozenset(), sub_version, SQL92, sql)
        if kind != TAG:
            raise SubscriptionParseFailedError(
                f"unknown expressionType {expression_type!r}: TAG or SQL92"
            )
        expr = (expression or "").strip()
        if expr in ("", SUB_ALL):
            return cls(topic, SUB_ALL, (), frozenset(), sub_version)
        tags = tuple(dict.fromkeys(t.strip() for t in expr.split("||") if t.strip()))
        if not tags:
            raise SubscriptionParseFailedError(
                f"subscription {expression!r} names no tag: use '*' or 'TagA || TagB'"
            )
        if any(t.upper().startswith("SQL") or "(" in t for t in tags):
            raise SubscriptionParseFailedError(
                f"subscription {expression!r}: only TAG expressions (a || b) are supported"
            )
        return cls(topic, expr, tags, frozenset(rmqcore.tag_code(t) for t in tags), sub_version)

    def as_json(self) -> dict[str, Any]:
        """The HeartbeatData form."""
        d: dict[str, Any] = {
            "topic": self.topic,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "classFilterMode": False,
            "expressionType": self.expression_type,
        }
        if self.tags_set:
            d["tagsSet"] = list(self.tags_set)
            d["codeSet"] = sorted(self.code_set)
        return d


def subscription_of(
    topic: str, expression: str | MessageSelector, sub_version: int = 0
) -> SubscriptionData:
    """A consumer's subscription from what ``subscribe`` was given: a tag
    expression, or a MessageSelector. SubscriptionParseFailedError when it
    does not parse: refused before anything is sent."""
    if isinstance(expression, MessageSelector):
        return SubscriptionData.parse(
            topic, expression.expression, sub_version, expression.expression_type
        )
    if not isinstance(expression, str):
        raise SubscriptionParseFailedError(
            f"subscribe takes a tag expression or a MessageSelector, not "
            f"{type(expression).__name__}"
        )
    return SubscriptionData.parse(topic, expression, sub_version)
