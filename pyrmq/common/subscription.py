"""SubscriptionData: a parsed subscription expression ("*" or "TagA || TagB",
FilterAPI.buildSubscriptionData), the same on both sides: the broker filters
ConsumeQueue units by `code_set` (tag hash codes), the client re-checks the
exact tag strings in `tags_set`."""

from __future__ import annotations

import dataclasses
from typing import Any

import rmqcore
from pyrmq.common.errors import SubscriptionParseFailedError

SUB_ALL = "*"


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionData:
    """code_set is empty for "*" (all tags)."""

    topic: str
    sub_string: str
    tags_set: tuple[str, ...]
    code_set: frozenset[int]
    sub_version: int = 0

    @property
    def matches_all(self) -> bool:
        return not self.tags_set

    def matches(self, tags: str | None) -> bool:
        """Whether a message with these tags is wanted (exact string check)."""
        return not self.tags_set or (tags is not None and tags in self.tags_set)

    @classmethod
    def parse(cls, topic: str, expression: str | None, sub_version: int = 0) -> SubscriptionData:
        """Raises SubscriptionParseFailedError (a BrokerError, code 23) for an
        expression that names no tag or is not a TAG expression."""
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
            "expressionType": "TAG",
        }
        if self.tags_set:
            d["tagsSet"] = list(self.tags_set)
            d["codeSet"] = sorted(self.code_set)
        return d
