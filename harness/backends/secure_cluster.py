"""A built-in cluster that asks for TLS and SASL (`ClusterSpec.security`,
docs/design.md#security).

Per cluster, in its directory: a CA of its own and the brokers'
certificate (harness/certificates.py), and two users with random
passwords: the brokers' (they authenticate to each other as it) and the
harness's (every client of the harness: workloads, probes, the fuzzer's
checks). The passwords live only in files of mode 600 under `secrets/`;
a broker's config names its file, the clients' settings
(harness/security.py) name theirs, and no record of a run holds either.
The users are written to ZooKeeper before the first broker starts, as
Kafka asks.

Hostnames: on the local backend every address is 127.0.0.1, which the
certificate names, and everyone checks it. In containers brokers advertise
addresses known only once they run; there nobody checks names, and the
cluster's own CA, which signs nothing but this cluster's certificate, is
what a client trusts.
"""
from __future__ import annotations

import secrets
import shutil
from pathlib import Path

from cluster import admin
from cluster.protocol.sasl import uses_sasl, uses_tls
from harness.certificates import make_certificates
from harness.security import ClientSecurity

BROKER_USER = "chaoslog-broker"
CLIENT_USER = "chaoslog-client"
MECHANISM = "SCRAM-SHA-512"


class ClusterSecurity:
    def __init__(self, protocol: str, base_dir: Path, check_hostname: bool):
        self.protocol = protocol
        self.dir = Path(base_dir) / "security"
        self.check_hostname = check_hostname

    @property
    def _secrets(self) -> Path:
        return self.dir / "secrets"

    def prepare(self, names: list[str]) -> None:
        """Certificates for `names` (what brokers are reached by) and the
        password files; once per cluster."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if uses_tls(self.protocol) and not (self.dir / "ca.pem").exists():
            make_certificates(self.dir, names)
        if uses_sasl(self.protocol):
            self._secrets.mkdir(mode=0o700, exist_ok=True)
            for user in (BROKER_USER, CLIENT_USER):
                path = self._secrets / f"{user}.password"
                if not path.exists():
                    path.touch(mode=0o600)
                    path.write_text(secrets.token_urlsafe(24))

    def create_users(self, zookeeper_connect: str) -> None:
        if not uses_sasl(self.protocol):
            return
        zk = admin.connect(zookeeper_connect, timeout=30)
        try:
            for user in (BROKER_USER, CLIENT_USER):
                admin.set_user(zk, user, (self._secrets / f"{user}.password").read_text())
        finally:
            zk.stop()
            zk.close()

    def broker_config(self, node_dir: Path, seen_as: str) -> dict[str, str]:
        """Copies what one broker needs into its directory (`node_dir`, which
        the broker sees as `seen_as`) and returns the config keys naming them."""
        mine = Path(node_dir) / "security"
        mine.mkdir(mode=0o700, parents=True, exist_ok=True)
        config = {"security.inter.broker.protocol": self.protocol,
                  "ssl.endpoint.identification.algorithm": "https" if self.check_hostname else ""}
        if uses_tls(self.protocol):
            for name in ("broker-keystore.pem", "ca.pem"):
                shutil.copy(self.dir / name, mine / name)
            config["ssl.keystore.location"] = f"{seen_as}/security/broker-keystore.pem"
            config["ssl.truststore.location"] = f"{seen_as}/security/ca.pem"
        if uses_sasl(self.protocol):
            shutil.copy(self._secrets / f"{BROKER_USER}.password", mine / "password")
            config.update({"sasl.inter.broker.username": BROKER_USER,
                           "sasl.mechanism.inter.broker.protocol": MECHANISM,
                           "sasl.inter.broker.password.file": f"{seen_as}/security/password"})
        return config

    def client(self) -> ClientSecurity:
        """The harness's settings: files, never the password itself."""
        return ClientSecurity(
            security_protocol=self.protocol,
            sasl_mechanism=MECHANISM,
            ssl_ca_location=str(self.dir / "ca.pem") if uses_tls(self.protocol) else None,
            ssl_check_hostname=self.check_hostname,
            username=CLIENT_USER if uses_sasl(self.protocol) else None,
            password_file=(str(self._secrets / f"{CLIENT_USER}.password")
                           if uses_sasl(self.protocol) else None))

    @property
    def client_dir(self) -> Path:
        """What a client in a container needs mounted (at the same path)."""
        return self.dir
