"""ACL 1.0: RocketMQ's plain ACL (plain_acl.yml, request signing).

signing.py        THE HMAC routine; AclClientRPCHook, which clients use to sign
permission.py     rights, admin codes, the resources each request code needs
remote_address.py white-list address forms
config.py         plain_acl.yml read, checked, written back atomically
validator.py      PlainAccessValidator: the broker's per-request check + reload

Imports only pyrmq.common (STYLE.md §10)."""

from pyrmq.acl.config import AclConfig, AclConfigError, PlainAccessConfig, parse_plain_acl
from pyrmq.acl.signing import (
    ENV_ACCESS_KEY,
    ENV_SECRET_KEY,
    AclClientRPCHook,
    credentials_hook,
    signature,
)
from pyrmq.acl.validator import PlainAccessValidator

__all__ = [
    "ENV_ACCESS_KEY",
    "ENV_SECRET_KEY",
    "AclClientRPCHook",
    "AclConfig",
    "AclConfigError",
    "PlainAccessConfig",
    "PlainAccessValidator",
    "credentials_hook",
    "parse_plain_acl",
    "signature",
]
