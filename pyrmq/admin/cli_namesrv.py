"""`pyrmq admin` commands about the name servers (mqadmin's names and
options): getNamesrvConfig, updateNamesrvConfig, wipeWritePerm,
addWritePerm. Each goes to every name server of -n, as mqadmin does."""

from __future__ import annotations

import argparse
from typing import Any

from pyrmq.admin.cli_common import Output, Setup, no_args, opt
from pyrmq.admin.client import AdminClient
from pyrmq.common.errors import ClientError


async def _get_namesrv_config(admin: AdminClient, a: argparse.Namespace) -> Output:
    out = await admin.get_namesrv_config()
    parts = [
        f"============{ns}============\n" + "\n".join(f"{k:<50}=  {v}" for k, v in conf.items())
        for ns, conf in out.items()
    ]
    return Output(out, "\n\n".join(parts))


def _setup_update_namesrv_config(p: argparse.ArgumentParser) -> None:
    opt(p, "-k", "key", required=True, help="config key (camelCase, as in namesrv.conf)")
    opt(p, "-v", "value", required=True, help="new value")


async def _update_namesrv_config(admin: AdminClient, a: argparse.Namespace) -> Output:
    key, value = a.key.strip(), a.value.strip()
    remarks = await admin.update_namesrv_config({key: value})
    lines = [f"update name server config success!{list(remarks)}", f"{key} : {value}"]
    lines += [f"{ns}: {r}" for ns, r in remarks.items() if r]
    data = {"nameServers": list(remarks), "key": key, "value": value,
            "remarks": {ns: r for ns, r in remarks.items() if r}}  # fmt: skip
    return Output(data, "\n".join(lines))


def _setup_write_perm(p: argparse.ArgumentParser) -> None:
    opt(p, "-b", "brokerName", dest="broker_name", required=True, help="broker name")


async def _write_perm(admin: AdminClient, a: argparse.Namespace, *, wipe: bool) -> Output:
    name = a.broker_name.strip()
    rows = await admin.write_perm_of_broker(name, wipe=wipe)
    key = "wipeTopicCount" if wipe else "addTopicCount"
    if rows and all(r[key] == 0 and r["remark"] for r in rows):
        # a broker no name server knows: a typo, most likely
        raise ClientError(rows[0]["remark"])
    what = "wipe" if wipe else "add"
    text = "\n".join(
        f"{what} write perm of broker[{name}] in name server[{r['nameServer']}] OK, {r[key]}"
        + (f" ({r['remark']})" if r["remark"] else "")
        for r in rows
    )
    return Output(rows, text)


async def _wipe_write_perm(admin: AdminClient, a: argparse.Namespace) -> Output:
    return await _write_perm(admin, a, wipe=True)


async def _add_write_perm(admin: AdminClient, a: argparse.Namespace) -> Output:
    return await _write_perm(admin, a, wipe=False)


NAMESRV_COMMANDS: list[tuple[str, str, str, Setup, Any]] = [
    ("getNamesrvConfig", "get-namesrv-config", "the name servers' settings",
     no_args, _get_namesrv_config),
    ("updateNamesrvConfig", "update-namesrv-config", "change a name server setting while it runs",
     _setup_update_namesrv_config, _update_namesrv_config),
    ("wipeWritePerm", "wipe-write-perm", "stop routing sends to a broker (name servers)",
     _setup_write_perm, _wipe_write_perm),
    ("addWritePerm", "add-write-perm", "route sends to a broker again (name servers)",
     _setup_write_perm, _add_write_perm),
]  # fmt: skip
