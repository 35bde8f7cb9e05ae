"""TLS tests: real servers on 127.0.0.1 (in-process LocalCluster or `python
-m pyrmq` processes) with certificates made at run time by `openssl`
(pyrmq.testing.certs, the `certs` fixture of tests/conftest.py); nothing
secret is committed."""

from __future__ import annotations

from tests.integration.conftest import arun  # noqa: F401  (the fixture)
