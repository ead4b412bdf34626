"""Broker configuration: a Java-style properties file with Kafka's key names.

Every key the broker understands is listed in DEFAULTS with its default, so a
typo in a suite's broker config is an error rather than a silently ignored
setting. Defaults follow the original design (Kafka 0.8): min ISR 1, unclean
leader election on, high-watermark truncation (docs/design.md#config).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.protocol.sasl import MECHANISMS as SASL_MECHANISMS, SECURITY_PROTOCOLS
from cluster.security import BrokerSecurity, SecurityError

# key -> default. The type of the default is the type of the setting.
# The coordination modes (cluster/coordination.py builds them).
COORDINATION_MODES = ("controller", "v2")

DEFAULTS: dict[str, Any] = {
    "broker.id": 0,
    # Where the broker binds, and what it registers in ZooKeeper for clients.
    "host.name": "0.0.0.0",
    "port": 9092,
    "advertised.host.name": "127.0.0.1",
    "advertised.port": 0,  # 0: same as port
    "zookeeper.connect": "127.0.0.1:2181",
    "zookeeper.session.timeout.ms": 6000,
    "zookeeper.connection.timeout.ms": 15000,
    "log.dirs": "/tmp/chaoslog-broker",
    # Topics
    "num.partitions": 1,
    "default.replication.factor": 1,
    "auto.create.topics.enable": False,
    # Log storage
    "log.segment.bytes": 64 * 1024 * 1024,
    "log.index.interval.bytes": 4096,
    "log.retention.bytes": -1,
    "log.retention.ms": 7 * 24 * 3600 * 1000,
    "log.retention.check.interval.ms": 60000,
    "log.flush.interval.messages": 2**63 - 1,  # Kafka: leave durability to replication
    "log.flush.interval.ms": 2**63 - 1,
    "replica.high.watermark.checkpoint.interval.ms": 5000,
    # Replication (docs/design.md#config)
    "min.insync.replicas": 1,
    "unclean.leader.election.enable": True,
    "replication.truncation": "hw",  # hw | leader-epoch (KIP-101/KIP-279)
    "replica.lag.time.max.ms": 10000,
    "replica.lag.max.messages": 4000,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.min.bytes": 1,
    "replica.fetch.max.bytes": 1024 * 1024,
    "replica.fetch.backoff.ms": 1000,
    "replica.socket.timeout.ms": 30000,
    # Requests
    "socket.request.max.bytes": 100 * 1024 * 1024,
    "message.max.bytes": 1000012,
    "request.timeout.ms": 30000,
    # Controller (docs/design.md#controller)
    "controller.socket.timeout.ms": 30000,
    "controller.message.queue.size": 10000,
    "controlled.shutdown.enable": True,
    "controlled.shutdown.max.retries": 3,
    "controlled.shutdown.retry.backoff.ms": 5000,
    "auto.leader.rebalance.enable": False,
    "leader.imbalance.per.broker.percentage": 10,
    "leader.imbalance.check.interval.seconds": 300,
    "reassignment.agent.interval.ms": 30000,
    # Consumer groups (docs/design.md#groups). Kafka's defaults except the
    # partition count of the offsets topic (Kafka: 50, too many for a small
    # test machine). The topic is created only when at least
    # offsets.topic.replication.factor brokers are live, as in Kafka.
    "offsets.topic.num.partitions": 10,
    "offsets.topic.replication.factor": 3,
    "offsets.commit.timeout.ms": 5000,
    "offset.metadata.max.bytes": 4096,
    "group.initial.rebalance.delay.ms": 3000,
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 300000,
    # Transactions (docs/design.md#transactions). Kafka's defaults except the
    # partition count of the transaction log (Kafka: 50), as for offsets.
    # transaction.protocol, not a Kafka key: "kip-98" (one producer epoch
    # for every transaction of a session) or "kip-890" (the epoch bumped as
    # each transaction ends, which only clients of EndTxn v5 follow).
    "transaction.state.log.num.partitions": 10,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "transaction.max.timeout.ms": 900000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 10000,
    "transaction.protocol": "kip-98",
    # Coordination (docs/design.md#coordination-modes): "controller" (the
    # default design) or "v2" (no controller; each partition's leader
    # coordinates).
    "coordination": "controller",
    "v2.preferred.replica.wait.ms": 500,      # the seed's PreferredReplicaTime
    "v2.metadata.refresh.ms": 500,            # how often a V2 broker reads the cluster
    "v2.state.queue.max.requests": 1000,
    # Security (docs/design.md#security). This broker has one listener, and it
    # speaks security.inter.broker.protocol: to clients and to the other
    # brokers (fetches, controller requests, transaction markers).
    "security.inter.broker.protocol": "PLAINTEXT",   # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
    # Not Kafka keys (Kafka reads them from a JAAS config): the user this
    # broker authenticates as to the others, and the file holding its
    # password, so that no password is written in this file.
    "sasl.inter.broker.username": "",
    "sasl.inter.broker.password.file": "",
    # TLS, PEM files only: the keystore holds the private key and the
    # certificate chain, the truststore the CA certificates.
    "ssl.keystore.type": "PEM",
    "ssl.keystore.location": "",
    "ssl.truststore.type": "PEM",
    "ssl.truststore.location": "",
    "ssl.endpoint.identification.algorithm": "https",   # "": brokers do not check each other's names
    # Harness hook, not a Kafka key: per-peer address overrides so that each
    # broker-to-broker link can be routed through its own proxy.
    # Format: "2=127.0.0.1:20012,3=127.0.0.1:20013".
    "chaoslog.peer.addresses": "",
    # Harness hook, not a Kafka key: run the controller component in this
    # broker. The data-plane tests turn it off and play the controller by hand.
    "chaoslog.controller.enable": True,
    # Harness hook, not a Kafka key: answer the test-only state window
    # (cluster/server/state_window.py), at most this many partitions a request.
    "chaoslog.state.window.enable": False,
    "chaoslog.state.window.max.partitions": 2000,
}


class ConfigError(ValueError):
    """A broker config that cannot be used; the message says which key and why."""


def _convert(key: str, raw: str, default: Any) -> Any:
    if isinstance(default, bool):
        low = raw.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise ConfigError(f"{key}={raw!r}: expected true or false")
    if isinstance(default, int):
        try:
            return int(raw.strip())
        except ValueError:
            raise ConfigError(f"{key}={raw!r}: expected an integer") from None
    return raw.strip()


def parse_properties(text: str) -> dict[str, str]:
    """Parse `key=value` lines; `#` and `!` start comments."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        if "=" not in s:
            raise ConfigError(f"line {n}: {line!r} is not key=value")
        k, v = s.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def render_properties(values: dict[str, Any]) -> str:
    def fmt(v: Any) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)

    return "".join(f"{k}={fmt(v)}\n" for k, v in sorted(values.items()))


@dataclass
class BrokerConfig:
    values: dict[str, Any] = field(default_factory=lambda: dict(DEFAULTS))
    _security: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_dict(cls, overrides: dict[str, Any]) -> "BrokerConfig":
        values = dict(DEFAULTS)
        for k, v in overrides.items():
            if k not in DEFAULTS:
                raise ConfigError(f"unknown broker config key {k!r}")
            values[k] = _convert(k, v, DEFAULTS[k]) if isinstance(v, str) else v
        cfg = cls(values)
        cfg.validate()
        return cfg

    @classmethod
    def load(cls, path: str | Path) -> "BrokerConfig":
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise ConfigError(f"cannot read broker config {path}: {e.strerror}") from None
        try:
            return cls.from_dict(parse_properties(text))
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None

    def validate(self) -> None:
        if self["replication.truncation"] not in ("hw", "leader-epoch"):
            raise ConfigError("replication.truncation must be 'hw' or 'leader-epoch'")
        if self["transaction.protocol"] not in ("kip-98", "kip-890"):
            raise ConfigError("transaction.protocol must be 'kip-98' or 'kip-890'")
        if self["coordination"] not in COORDINATION_MODES:
            raise ConfigError(f"coordination must be one of {', '.join(map(repr, COORDINATION_MODES))}")
        if self["min.insync.replicas"] < 1:
            raise ConfigError("min.insync.replicas must be at least 1")
        if self["offsets.topic.num.partitions"] < 1 or self["offsets.topic.replication.factor"] < 1:
            raise ConfigError("offsets.topic.num.partitions and offsets.topic.replication.factor "
                              "must be at least 1")
        if self["broker.id"] < 0:
            raise ConfigError("broker.id must not be negative")
        self._validate_security()
        self.peer_addresses()  # parse errors surface now

    def _validate_security(self) -> None:
        protocol = self["security.inter.broker.protocol"]
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"security.inter.broker.protocol={protocol}: use one of "
                              f"{', '.join(SECURITY_PROTOCOLS)}")
        unknown = set(self.sasl_mechanisms) - set(SASL_MECHANISMS)
        if unknown or not self.sasl_mechanisms:
            raise ConfigError(f"sasl.enabled.mechanisms={self['sasl.enabled.mechanisms']}: "
                              f"a list of {', '.join(SASL_MECHANISMS)}")
        if self["sasl.mechanism.inter.broker.protocol"] not in self.sasl_mechanisms:
            raise ConfigError("sasl.mechanism.inter.broker.protocol must be one of "
                              "sasl.enabled.mechanisms")
        for key in ("ssl.keystore.type", "ssl.truststore.type"):
            if self[key] != "PEM":
                raise ConfigError(f"{key}={self[key]}: only PEM files are read")
        if protocol in ("SSL", "SASL_SSL") and not self["ssl.keystore.location"]:
            raise ConfigError(f"security.inter.broker.protocol={protocol} needs "
                              "ssl.keystore.location (a PEM file: key and certificate chain)")
        if protocol.startswith("SASL") and not (self["sasl.inter.broker.username"]
                                                and self["sasl.inter.broker.password.file"]):
            raise ConfigError(f"security.inter.broker.protocol={protocol} needs "
                              "sasl.inter.broker.username and sasl.inter.broker.password.file")

    @property
    def security(self):
        """The broker's security (cluster/security.py), made once: the
        password file is read on first use, at startup."""
        if self._security is None:
            try:
                self._security = BrokerSecurity.from_config(self)
            except SecurityError as e:
                raise ConfigError(str(e)) from None
        return self._security

    @property
    def sasl_mechanisms(self) -> tuple[str, ...]:
        return tuple(m.strip() for m in self["sasl.enabled.mechanisms"].split(",") if m.strip())

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def broker_id(self) -> int:
        return self["broker.id"]

    @property
    def advertised(self) -> tuple[str, int]:
        return self["advertised.host.name"], self["advertised.port"] or self["port"]

    def peer_addresses(self) -> dict[int, tuple[str, int]]:
        """Parse chaoslog.peer.addresses into {broker_id: (host, port)}."""
        out: dict[int, tuple[str, int]] = {}
        for item in filter(None, (s.strip() for s in self["chaoslog.peer.addresses"].split(","))):
            try:
                bid, addr = item.split("=", 1)
                host, port = addr.rsplit(":", 1)
                out[int(bid)] = (host, int(port))
            except ValueError:
                raise ConfigError(
                    f"chaoslog.peer.addresses: {item!r} is not ID=HOST:PORT") from None
        return out

    def render(self) -> str:
        return render_properties(self.values)
