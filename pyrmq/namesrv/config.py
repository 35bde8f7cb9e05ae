"""NamesrvRuntimeConfig: the name server's settings as GET_NAMESRV_CONFIG
(319) shows them (Java properties text, NamesrvConfig's camelCase keys plus
listenPort) and the ones UPDATE_NAMESRV_CONFIG (318) may change while it
runs (DefaultRequestProcessor.updateConfig / getConfig).

Runtime keys (read on every use, so a change takes effect at once):
enableAllTopicList (GET_ALL_TOPIC_LIST_FROM_NAMESERVER answers SYSTEM_ERROR
"disable" when false), enableTopicList (the same for GET_TOPICS_BY_CLUSTER),
scanNotActiveBrokerInterval (ms between two scans for brokers gone silent).
Every other key shown is read once, at start: an update naming one changes
nothing and is refused (NO_PERMISSION), the remark naming it; RocketMQ
refuses only its black list (configBlackList, configStorePath, kvConfigPath)
and silently keeps the rest for the next start. Unknown keys are refused
too (INVALID_PARAMETER); RocketMQ ignores them.

A name server started with `-c namesrv.conf` writes an accepted update into
that file in place (RocketMQ: Configuration.persist to configStorePath), so
a restart keeps it; without one the change lives in memory only and the
answer's remark says so."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from pyrmq.common.config_file import rewrite_properties_file
from pyrmq.common.errors import ClientError, InvalidParameterError, NoPermissionError

log = logging.getLogger("pyrmq.namesrv")

#: the keys UPDATE_NAMESRV_CONFIG may change
RUNTIME_KEYS = ("enableAllTopicList", "enableTopicList", "scanNotActiveBrokerInterval")
#: scanNotActiveBrokerInterval bounds (ms): a scan at least every 100 ms
#: (more often only burns CPU) and at most every day
MIN_SCAN_INTERVAL_MS = 100
MAX_SCAN_INTERVAL_MS = 86_400_000


@dataclasses.dataclass(slots=True)
class NamesrvSettings:
    """The runtime keys' values (snake_case of NamesrvConfig's names)."""

    enable_all_topic_list: bool = True
    enable_topic_list: bool = True
    #: RocketMQ's default is 5000; pyrmq's name server has always scanned
    #: every 10 s (brokers expire after 120 s either way)
    scan_not_active_broker_interval: int = 10_000


def _bool(key: str, raw: str) -> bool:
    t = raw.strip().lower()
    if t not in ("true", "false"):
        raise ValueError(f"{key}={raw!r}: expected true or false")
    return t == "true"


def _interval(key: str, raw: str) -> int:
    try:
        n = int(raw.strip())
    except ValueError:
        raise ValueError(f"{key}={raw!r}: expected milliseconds") from None
    if not MIN_SCAN_INTERVAL_MS <= n <= MAX_SCAN_INTERVAL_MS:
        raise ValueError(
            f"{key}={n}: expected {MIN_SCAN_INTERVAL_MS}..{MAX_SCAN_INTERVAL_MS} milliseconds"
        )
    return n


_PARSE = {
    "enableAllTopicList": ("enable_all_topic_list", _bool),
    "enableTopicList": ("enable_topic_list", _bool),
    "scanNotActiveBrokerInterval": ("scan_not_active_broker_interval", _interval),
}


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


class NamesrvRuntimeConfig:
    """`fixed`: the settings read once at start (camelCase -> value), shown
    by GET_NAMESRV_CONFIG but not changeable; `config_path`: the
    namesrv.conf accepted updates are written to (None: memory only)."""

    def __init__(
        self,
        settings: NamesrvSettings | None = None,
        fixed: dict[str, Any] | None = None,
        config_path: str | None = None,
    ) -> None:
        self.settings = settings or NamesrvSettings()
        self.fixed = dict(fixed or {})
        self.config_path = config_path

    @staticmethod
    def settings_from_properties(props: dict[str, Any]) -> NamesrvSettings:
        """The runtime keys of a namesrv.conf (others ignored); ClientError
        on a bad value."""
        s = NamesrvSettings()
        for key, (name, parse) in _PARSE.items():
            if key in props:
                try:
                    setattr(s, name, parse(key, str(props[key])))
                except ValueError as e:
                    raise ClientError(f"namesrv config: {e}") from None
        return s

    def properties(self) -> dict[str, str]:
        out = {k: _text(v) for k, v in self.fixed.items()}
        out["configStorePath"] = self.config_path or ""
        for key, (name, _) in _PARSE.items():
            out[key] = _text(getattr(self.settings, name))
        return dict(sorted(out.items()))

    def format(self) -> str:
        return "".join(f"{k}={v}\n" for k, v in self.properties().items())

    def prepare(self, changes: dict[str, str]) -> dict[str, Any]:
        """The changes (camelCase -> parsed value) that differ from now,
        nothing changed yet. NoPermissionError names keys read only at
        start, InvalidParameterError unknown keys and bad values."""
        known = self.properties()
        unknown = sorted(k for k in changes if k not in known)
        if unknown:
            raise InvalidParameterError(
                f"unknown name server config keys: {', '.join(unknown)} "
                f"(runtime keys: {', '.join(RUNTIME_KEYS)})"
            )
        fixed = sorted(k for k in changes if k not in _PARSE)
        if fixed:
            raise NoPermissionError(
                f"can not update at runtime: {', '.join(fixed)} (read at start: set them in "
                f"namesrv.conf and restart the name server); runtime keys: "
                f"{', '.join(RUNTIME_KEYS)}"
            )
        out = {}
        for key, raw in changes.items():
            name, parse = _PARSE[key]
            try:
                value = parse(key, raw)
            except ValueError as e:
                raise InvalidParameterError(f"bad name server config value: {e}") from None
            if value != getattr(self.settings, name):
                out[key] = value
        return out

    def persist(self, changed: dict[str, Any]) -> None:
        """Blocking (an executor thread): the changed keys written into
        config_path in place. OSError leaves the file as it was."""
        if self.config_path is None or not changed:
            return
        rewrite_properties_file(
            self.config_path,
            {k: _text(v) for k, v in changed.items()},
            {k: {_PARSE[k][0]} for k in changed},
            note=f"set by updateNamesrvConfig {time.strftime('%Y-%m-%d %H:%M:%S')}",
        )

    def apply(self, changed: dict[str, Any]) -> None:
        for key, value in changed.items():
            setattr(self.settings, _PARSE[key][0], value)
        if changed:
            log.info("name server config updated at runtime: %s", changed)


__all__ = ["RUNTIME_KEYS", "NamesrvRuntimeConfig", "NamesrvSettings"]
