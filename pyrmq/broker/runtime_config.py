"""BrokerRuntimeConfig: the broker's settings as GET_BROKER_CONFIG shows them
(Java properties text, camelCase keys, BrokerConfig then MessageStoreConfig)
and the keys UPDATE_BROKER_CONFIG may change while the broker runs.

A runtime key is bound to the attributes of the components that read it
(`bind("longPollingEnable", (pull_processor, "long_polling_enable"))`);
an update sets them at once, and the broker's BrokerConfig is replaced by
one with the new values (validated as broker.conf is). An update naming any
other key changes nothing and is refused, the remark naming the keys: those
are read once, at start (set them in broker.conf and restart)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from pyrmq.broker.config import BrokerConfig
from pyrmq.common.config_file import camel_case
from pyrmq.common.errors import ClientError, InvalidParameterError, NoPermissionError

log = logging.getLogger("pyrmq.broker")

Binding = tuple[Any, str]


def parse_properties_text(text: str) -> dict[str, str]:
    """Java Properties text (key=value lines, # comments); ValueError on a
    line that is neither."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        seps = [i for i in (s.find("="), s.find(":")) if i > 0]
        if not seps:
            raise ValueError(f"line {n}: expected key=value, got {line!r}")
        i = min(seps)
        out[s[:i].strip()] = s[i + 1 :].strip()
    return out


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


class BrokerRuntimeConfig:
    def __init__(
        self,
        config: BrokerConfig,
        store_config: Any,
        on_change: Callable[[BrokerConfig, set[str]], None] | None = None,
    ) -> None:
        self.config = config
        self.store_config = store_config
        self._on_change = on_change
        self._bindings: dict[str, tuple[str, list[Binding]]] = {}
        self.data_version = {"timestamp": int(time.time() * 1000), "counter": 0}

    def bind(self, key: str, *targets: Binding) -> None:
        """Make the BrokerConfig key (camelCase) changeable at runtime: an
        update sets each (object, attribute) to the new value."""
        fields = {camel_case(f.name): f.name for f in dataclasses.fields(BrokerConfig)}
        if key not in fields:
            raise KeyError(f"{key} is not a BrokerConfig key")
        self._bindings[key] = (fields[key], list(targets))

    @property
    def runtime_keys(self) -> list[str]:
        return sorted(self._bindings)

    def properties(self) -> dict[str, str]:
        """Every setting, camelCase key -> text, as getBrokerConfig lists them."""
        out = {}
        for obj in (self.config, self.store_config):
            for f in dataclasses.fields(obj):
                out[camel_case(f.name)] = _text(getattr(obj, f.name))
        return out

    def format(self) -> str:
        return "".join(f"{k}={v}\n" for k, v in self.properties().items())

    def version_json(self) -> str:
        return json.dumps(
            {"counter": self.data_version["counter"], "timestamp": self.data_version["timestamp"]},
            separators=(",", ":"),
        )

    def update(self, changes: dict[str, str]) -> list[str]:
        """Apply changes (camelCase keys); the keys that changed. Raises
        NoPermissionError naming the keys that cannot change at runtime,
        InvalidParameterError for unknown keys or values broker.conf would
        refuse; nothing changes then."""
        known = set(self.properties())
        unknown = sorted(k for k in changes if k not in known)
        if unknown:
            raise InvalidParameterError(f"unknown broker config keys: {', '.join(unknown)}")
        fixed = sorted(k for k in changes if k not in self._bindings)
        if fixed:
            raise NoPermissionError(
                f"can not update at runtime: {', '.join(fixed)} (read at start: set them in "
                f"broker.conf and restart the broker); runtime keys: {', '.join(self.runtime_keys)}"
            )
        current = {
            camel_case(f.name): getattr(self.config, f.name)
            for f in dataclasses.fields(BrokerConfig)
        }
        try:
            new = BrokerConfig.from_properties({**current, **changes})
        except (ClientError, ValueError, TypeError) as e:
            raise InvalidParameterError(f"bad broker config value: {e}") from None
        max_queues = getattr(self.store_config, "max_queue_nums", None)
        if max_queues is not None and new.retry_queue_nums > max_queues:
            # the queues of each %RETRY% topic the broker creates from now on
            raise InvalidParameterError(
                f"bad broker config value: retryQueueNums={new.retry_queue_nums} is more than "
                f"maxQueueNums={max_queues}"
            )
        changed = set()
        for key in changes:
            name, targets = self._bindings[key]
            value = getattr(new, name)
            if value == getattr(self.config, name):
                continue
            for obj, attr in targets:
                setattr(obj, attr, value)
            changed.add(key)
        if changed:
            log.info(
                "broker config updated at runtime: %s", {k: changes[k] for k in sorted(changed)}
            )
            self.config = new
            self.data_version = {
                "timestamp": int(time.time() * 1000),
                "counter": self.data_version["counter"] + 1,
            }
            if self._on_change is not None:
                self._on_change(new, changed)
        return sorted(changed)


__all__ = ["BrokerRuntimeConfig", "parse_properties_text"]
