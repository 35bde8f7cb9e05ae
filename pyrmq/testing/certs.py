"""Throw-away certificates for tests and benchmarks, made at run time by
the `openssl` command (nothing here is ever committed): a CA, a server
certificate for 127.0.0.1/localhost and a client certificate signed by it,
and a second CA that signed neither (to see verification fail)."""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import subprocess

from pyrmq.remoting.tls import TlsConfig

#: days the certificates are valid: a run, with slack for clock skew
_DAYS = "2"


@dataclasses.dataclass(frozen=True)
class CertFiles:
    ca: pathlib.Path
    server_cert: pathlib.Path
    server_key: pathlib.Path
    client_cert: pathlib.Path
    client_key: pathlib.Path
    #: a CA that signed nothing here
    other_ca: pathlib.Path

    def server_properties(self, mode: str, **extra: str) -> dict[str, str]:
        """tls.* keys of a server in mode, with these files."""
        return {
            "tls.server.mode": mode,
            "tls.server.certPath": str(self.server_cert),
            "tls.server.keyPath": str(self.server_key),
            **extra,
        }

    def server_tls(self, mode: str, **extra: str) -> TlsConfig:
        """The TlsConfig of servers in mode with these files, whose own
        client side (a broker's to its name server) trusts this CA."""
        return TlsConfig.from_properties(
            self.server_properties(
                mode, **{"tls.enable": "true", "tls.client.trustCertPath": str(self.ca), **extra}
            )
        )


def openssl_available() -> bool:
    return shutil.which("openssl") is not None


def _run(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: pathlib.Path, name: str) -> None:
    _run(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", _DAYS,
        "-subj", f"/CN=pyrmq test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip


def _leaf(d: pathlib.Path, name: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext)
    _run(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=pyrmq test {name}",
        cwd=d,
    )  # fmt: skip
    _run(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", f"{name}.pem", "-days", _DAYS, "-extfile", f"{name}.ext",
        cwd=d,
    )  # fmt: skip


def make_test_certs(directory: str | pathlib.Path) -> CertFiles:
    """Write the certificates and keys under directory (PEM)."""
    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _ca(d, "other-ca")
    _leaf(
        d,
        "server",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    _leaf(d, "client", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    return CertFiles(
        ca=d / "ca.pem",
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
        other_ca=d / "other-ca.pem",
    )
