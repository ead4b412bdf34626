"""TLS certificates for one secure cluster (docs/design.md#security), made
with Debian's openssl: a CA of the cluster's own, and one server
certificate, signed by it, for every name and address the brokers are
reached by (brokers share it, as they share the listener's protocol).

Keys are EC P-256 and live only in the run's directory: the CA's private key
is deleted once the server certificate is signed, so nothing else can be
signed with it.
"""
from __future__ import annotations

import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = 7


class CertificateError(RuntimeError):
    """openssl is missing or failed; the message says what to do."""


@dataclass(frozen=True)
class Certificates:
    ca: Path          # the CA certificate (PEM): the clients' truststore
    keystore: Path    # the brokers' private key and certificate chain (PEM)


def _openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        raise CertificateError("openssl is not installed: run `make setup` "
                               "(or apt-get install openssl)")
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise CertificateError(f"openssl {args[0]} failed: {done.stderr.strip()[-500:]}")


def _san(names: list[str]) -> str:
    out = []
    for name in dict.fromkeys(names):
        try:
            ipaddress.ip_address(name)
            out.append(f"IP:{name}")
        except ValueError:
            out.append(f"DNS:{name}")
    return ",".join(out)


def make_certificates(directory: Path, names: list[str]) -> Certificates:
    """A CA and a server certificate for `names` (host names and IP
    addresses), in `directory`."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    names = [*names, "localhost", "127.0.0.1"]
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "ca.key", "-out", "ca.pem", "-days", str(DAYS),
             "-subj", "/CN=chaoslog test CA", cwd=d)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=chaoslog broker",
             "-addext", f"subjectAltName={_san(names)}", cwd=d)
    _openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "broker.pem", "-days", str(DAYS), "-copy_extensions", "copy",
             cwd=d)
    keystore = d / "broker-keystore.pem"
    keystore.write_text((d / "broker.key").read_text() + (d / "broker.pem").read_text()
                        + (d / "ca.pem").read_text())
    keystore.chmod(0o600)
    for leftover in ("ca.key", "broker.key", "broker.csr", "ca.srl"):
        (d / leftover).unlink(missing_ok=True)
    return Certificates(d / "ca.pem", keystore)
