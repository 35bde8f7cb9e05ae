"""BrokerRuntimeConfig: the broker's settings as GET_BROKER_CONFIG shows them
(Java properties text, camelCase keys, BrokerConfig then MessageStoreConfig)
and the keys UPDATE_BROKER_CONFIG may change while the broker runs.

A runtime key is bound to the attributes of the components that read it
(`bind("longPollingEnable", (pull_processor, "long_polling_enable"))`);
an update sets them at once, and the broker's BrokerConfig is replaced by
one with the new values (validated as broker.conf is). An update naming any
other key changes nothing and is refused, the remark naming the keys: those
are read once, at start (set them in broker.conf and restart).

A broker started from a config file (`-c broker.conf`) writes an accepted
update back into that file (persist: the changed keys' lines rewritten in
place, everything else kept), so a restart keeps it: RocketMQ's
Configuration.persist. Without a file the update lives in memory only
(RocketMQ would write ~/store/config/broker.properties, which nothing reads
back unless it is passed as -c)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from pyrmq.broker.config import BrokerConfig
from pyrmq.common.config_file import (
    camel_case,
    parse_properties_text,
    rewrite_properties_file,
)
from pyrmq.common.errors import ClientError, InvalidParameterError, NoPermissionError

log = logging.getLogger("pyrmq.broker")

Binding = tuple[Any, str]


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigUpdate:
    """A checked UPDATE_BROKER_CONFIG: the BrokerConfig it makes and the
    keys whose value it changes (camelCase -> new value as text)."""

    config: BrokerConfig
    changed: dict[str, str]

    def __bool__(self) -> bool:
        """Whether it changes anything (RuntimeConfig.prepare's contract)."""
        return bool(self.changed)


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


class BrokerRuntimeConfig:
    def __init__(
        self,
        config: BrokerConfig,
        store_config: Any,
        on_change: Callable[[BrokerConfig, set[str]], None] | None = None,
        config_path: str | None = None,
    ) -> None:
        self.config = config
        #: the broker.conf the broker was started from (-c): accepted
        #: updates are written back into it; None: they live in memory only
        self.config_path = config_path
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
        """Every setting, camelCase key -> text, as getBrokerConfig lists them
        (brokerConfigPath: the file updates are written to, as RocketMQ
        shows it; empty when there is none)."""
        out = {"brokerConfigPath": self.config_path or ""}
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

    def prepare(self, changes: dict[str, str]) -> ConfigUpdate:
        """What changes would do (camelCase keys), nothing changed yet.
        Raises NoPermissionError naming the keys that cannot change at
        runtime, InvalidParameterError for unknown keys or values broker.conf
        would refuse."""
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
        changed = {}
        for key in changes:
            name = self._bindings[key][0]
            value = getattr(new, name)
            if value != getattr(self.config, name):
                changed[key] = _text(value)
        return ConfigUpdate(new, changed)

    def apply(self, update: ConfigUpdate) -> list[str]:
        """Set what prepare found changed on the bound components; the keys."""
        if not update.changed:
            return []
        for key in update.changed:
            name, targets = self._bindings[key]
            for obj, attr in targets:
                setattr(obj, attr, getattr(update.config, name))
        log.info("broker config updated at runtime: %s", update.changed)
        self.config = update.config
        self.data_version = {
            "timestamp": int(time.time() * 1000),
            "counter": self.data_version["counter"] + 1,
        }
        if self._on_change is not None:
            self._on_change(update.config, set(update.changed))
        return sorted(update.changed)

    def update(self, changes: dict[str, str]) -> list[str]:
        """prepare then apply, in memory only; the keys that changed."""
        return self.apply(self.prepare(changes))

    def persist(self, update: ConfigUpdate) -> None:
        """Blocking (an executor thread): the changed keys written into the
        broker's config file in place (rewrite_properties_file), as
        RocketMQ's Configuration.persist writes its brokerConfigPath. OSError
        when that fails; the file is then as it was."""
        if self.config_path is None or not update.changed:
            return
        spellings = {}
        for key in update.changed:
            name = self._bindings[key][0]
            spellings[key] = {name} | ({camel_case(name[:-3])} if name.endswith("_ms") else set())
        rewrite_properties_file(
            self.config_path,
            update.changed,
            spellings,
            note=f"set by updateBrokerConfig {time.strftime('%Y-%m-%d %H:%M:%S')}",
        )


__all__ = ["BrokerRuntimeConfig", "ConfigUpdate", "parse_properties_text"]
