"""A client's security settings: how the harness's Kafka clients reach a
cluster that wants TLS, SASL or both (docs/targets.md, "Security settings").

One ClientSecurity serves every client the harness builds: confluent-kafka,
kafka-python and aiokafka each take it through one small mapping, the
harness's own wire client (harness/kafka_wire.py) as an ssl.SSLContext. It
comes from a client config file (`chaoslog run --client-config FILE`: Kafka
client properties, or TOML with a [client] table) or a campaign's [client]
table, in Kafka's own key names, and goes into run.json with the run's spec.

The password is never one of its fields: the settings name where it comes
from, an environment variable or a file, and `password()` reads it only when
a client is built, in the process that builds it. So run.json, a shrink's
spec.json and the workload workers' command lines name the source, never the
secret.
"""
from __future__ import annotations

import os
import ssl
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from cluster.protocol.sasl import MECHANISMS, SECURITY_PROTOCOLS as PROTOCOLS

# The keys of a client config, as Kafka's clients name them.
KEYS = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password.env",
        "sasl.password.file", "ssl.ca.location", "ssl.endpoint.identification.algorithm")
# Keys that would put a secret into the config itself.
INLINE_SECRETS = ("sasl.password", "sasl.jaas.config")
# ssl.endpoint.identification.algorithm: https checks the broker's host name.
HOSTNAME_CHECK = {"https": True, "none": False, "": False}


@dataclass(frozen=True)
class ClientSecurity:
    """What a client needs to connect: the protocol, SASL's mechanism,
    user name and the password's source, TLS's CA. The default is
    PLAINTEXT, which maps to no setting at all: a client gets what it got
    before there were settings."""
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    ssl_ca_location: str | None = None     # a PEM file; None: the system's CAs
    ssl_check_hostname: bool = True
    username: str | None = None
    password_env: str | None = None        # the name of an environment variable
    password_file: str | None = None       # a file holding the password

    def __post_init__(self) -> None:
        p = self.security_protocol
        if p not in PROTOCOLS:
            raise ValueError(f"security.protocol={p!r}: one of {', '.join(PROTOCOLS)}")
        if self.sasl_mechanism not in MECHANISMS:
            raise ValueError(f"sasl.mechanism={self.sasl_mechanism!r}: one of "
                             f"{', '.join(MECHANISMS)}")
        given = [k for k, v in (("sasl.username", self.username),
                                ("sasl.password.env", self.password_env),
                                ("sasl.password.file", self.password_file)) if v]
        if not self.sasl and given:
            raise ValueError(f"{given[0]} is set, but security.protocol={p} uses no SASL: "
                             f"use SASL_PLAINTEXT or SASL_SSL")
        if self.sasl and not self.username:
            raise ValueError(f"security.protocol={p} needs sasl.username")
        if self.sasl and bool(self.password_env) == bool(self.password_file):
            raise ValueError(f"security.protocol={p} needs one source of the password: "
                             f"sasl.password.env=VARIABLE or sasl.password.file=PATH")
        if self.ssl_ca_location and not self.tls:
            raise ValueError(f"ssl.ca.location is set, but security.protocol={p} uses no TLS: "
                             f"use SSL or SASL_SSL")
        if self.ssl_ca_location and not Path(self.ssl_ca_location).is_file():
            raise ValueError(f"ssl.ca.location={self.ssl_ca_location}: no such file; name the "
                             f"CA certificate (PEM) that signed the brokers' certificates")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    # -- loading and saving ---------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | Path) -> "ClientSecurity":
        """A client config file: TOML (a name ending in .toml) with one
        [client] table, or else Kafka client properties (KEY=VALUE lines,
        # comments). ValueError says what is wrong, never a value read."""
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as e:
            raise ValueError(f"cannot read it ({e.strerror})") from None
        if p.suffix != ".toml":
            return cls.from_data(_properties(text))
        try:
            d = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"not TOML ({e})") from None
        if list(d) != ["client"] or not isinstance(d["client"], dict):
            raise ValueError("a TOML client config is one [client] table of "
                             "security.protocol, sasl.* and ssl.* keys")
        return cls.from_data(d["client"])

    @classmethod
    def from_data(cls, d: Mapping[str, Any]) -> "ClientSecurity":
        """Settings from Kafka's key names (a [client] table, a properties
        file, `to_json`'s output); TOML's dotted keys may nest them."""
        flat = _flat(d)
        for key in flat:
            if key in INLINE_SECRETS:
                raise ValueError(f"{key}: secrets are never written into a config or a spec; "
                                 f"give sasl.username and sasl.password.env=VARIABLE or "
                                 f"sasl.password.file=PATH")
            if key not in KEYS:
                raise ValueError(f"{key}: not a client setting ({', '.join(KEYS)})")
            if not isinstance(flat[key], str):
                raise ValueError(f"{key}: a text, not {flat[key]!r}")
        check = flat.get("ssl.endpoint.identification.algorithm", "https").lower()
        if check not in HOSTNAME_CHECK:
            raise ValueError(f"ssl.endpoint.identification.algorithm={check!r}: https (check "
                             f"the brokers' host names) or none")
        return cls(security_protocol=flat.get("security.protocol", "PLAINTEXT"),
                   sasl_mechanism=flat.get("sasl.mechanism", "PLAIN"),
                   ssl_ca_location=flat.get("ssl.ca.location") or None,
                   ssl_check_hostname=HOSTNAME_CHECK[check],
                   username=flat.get("sasl.username") or None,
                   password_env=flat.get("sasl.password.env") or None,
                   password_file=flat.get("sasl.password.file") or None)

    def to_json(self) -> dict[str, str]:
        """The settings in Kafka's key names, the keys the protocol uses
        only: where the password comes from, never the password."""
        d = {"security.protocol": self.security_protocol}
        if self.sasl:
            d["sasl.mechanism"] = self.sasl_mechanism
            d["sasl.username"] = str(self.username)
            if self.password_env:
                d["sasl.password.env"] = self.password_env
            else:
                d["sasl.password.file"] = str(self.password_file)
        if self.tls:
            d["ssl.endpoint.identification.algorithm"] = ("https" if self.ssl_check_hostname
                                                          else "none")
            if self.ssl_ca_location:
                d["ssl.ca.location"] = self.ssl_ca_location
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ClientSecurity":
        """What `to_json` wrote (its form is the data form)."""
        return cls.from_data(d)

    # -- the password -------------------------------------------------------------------

    def password(self) -> str:
        """The SASL password, read from its source now. ValueError says what
        to set when the variable is unset or the file cannot be read."""
        if self.password_env:
            value = os.environ.get(self.password_env)
            if not value:
                raise ValueError(f"sasl.password.env names {self.password_env}, which is not "
                                 f"set: export {self.password_env} with the SASL password "
                                 f"before running chaoslog")
            return value
        if not self.password_file:
            raise ValueError("no SASL password: set sasl.password.env or sasl.password.file")
        try:
            value = Path(self.password_file).read_text().rstrip("\r\n")
        except OSError as e:
            raise ValueError(f"sasl.password.file {self.password_file}: cannot read it "
                             f"({e.strerror}); write the SASL password into it, readable by "
                             f"the user running chaoslog") from None
        if not value:
            raise ValueError(f"sasl.password.file {self.password_file} is empty; write the "
                             f"SASL password into it")
        return value

    # -- each client's settings ---------------------------------------------------------

    def confluent_config(self) -> dict[str, Any]:
        """librdkafka's properties, for confluent-kafka's Producer, Consumer
        and AdminClient: Kafka's names, as in to_json, with the password in
        place of its source."""
        if self.security_protocol == "PLAINTEXT":
            return {}
        out: dict[str, Any] = {k: v for k, v in self.to_json().items()
                               if not k.startswith("sasl.password.")}
        if self.sasl:
            out["sasl.mechanisms"] = out.pop("sasl.mechanism")
            out["sasl.password"] = self.password()
        return out

    def kafka_python_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of kafka-python's KafkaProducer and KafkaConsumer."""
        out = self._python_kwargs()
        if self.tls:
            out.update(ssl_cafile=self.ssl_ca_location, ssl_check_hostname=self.ssl_check_hostname)
        return out

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of aiokafka's producer and consumer. aiokafka
        wants a context for TLS; ssl_context() is the one its own
        helpers.create_ssl_context(cafile=...) would build."""
        out = self._python_kwargs()
        if self.tls:
            out["ssl_context"] = self.ssl_context()
        return out

    def _python_kwargs(self) -> dict[str, Any]:
        """What kafka-python and aiokafka name alike."""
        if self.security_protocol == "PLAINTEXT":
            return {}
        out: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.sasl:
            out.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.username,
                       sasl_plain_password=self.password())
        return out

    def ssl_context(self) -> ssl.SSLContext:
        """A client's TLS context: trusting the CA (the system's CAs without
        one), checking the broker's host name unless told not to. For a
        client that speaks the protocol itself (harness/kafka_wire.py)."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ssl_ca_location)
        ctx.check_hostname = self.ssl_check_hostname
        return ctx


PLAINTEXT = ClientSecurity()


def _properties(text: str) -> dict[str, str]:
    """KEY=VALUE lines (Kafka's client properties; # and ! start comments).
    Errors name the line, never its text: it may hold a secret."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"line {n}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML's dotted keys (security.protocol = ...) as nested tables,
    flattened back to Kafka's names."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
