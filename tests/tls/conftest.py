"""TLS tests: real servers on 127.0.0.1 (in-process LocalCluster or `python
-m pyrmq` processes) with certificates made at run time by `openssl`
(pyrmq.testing.certs); nothing secret is committed."""

from __future__ import annotations

import pytest

from pyrmq.testing.certs import CertFiles, make_test_certs, openssl_available
from tests.integration.conftest import arun  # noqa: F401  (the fixture)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertFiles:
    if not openssl_available():
        pytest.skip("the openssl command is needed to make test certificates")
    return make_test_certs(tmp_path_factory.mktemp("certs"))
