"""A broker's security, from its config (docs/design.md#security): the
protocol of its one listener, which it also speaks to the other brokers;
the TLS contexts; the SASL mechanisms it enables; and the user it
authenticates as when it connects to another broker.

`open_async` with `authenticate_async`, and `connect`, open those
broker-to-broker connections (the fetchers' and transaction markers'
asyncio streams, the controller's blocking sockets): TLS first where the
protocol has it, then SASL.
"""
from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.protocol import sasl

_SIZE = struct.Struct(">i")
_HDR = struct.Struct(">hhih")


class SecurityError(ValueError):
    """A security setting that cannot be used; the message names the key."""


def request_frame(api_key: int, version: int, correlation_id: int, client_id: bytes,
                  body: bytes) -> bytes:
    """A whole request frame with header v1."""
    header = _HDR.pack(api_key, version, correlation_id, len(client_id)) + client_id
    return _SIZE.pack(len(header) + len(body)) + header + body


def socket_roundtrip(sock: socket.socket, client_id: bytes) -> sasl.Roundtrip:
    """Requests on a blocking socket, one at a time: what sasl.authenticate drives."""
    corr = iter(range(1, 1 << 31))

    def roundtrip(api_key: int, version: int, body: bytes) -> bytes:
        sock.sendall(request_frame(api_key, version, next(corr), client_id, body))
        (n,) = _SIZE.unpack(_recv_exact(sock, 4))
        return _recv_exact(sock, n)[4:]
    return roundtrip


def _server_context(keystore: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(keystore)
    except (OSError, ssl.SSLError) as e:
        raise SecurityError(f"ssl.keystore.location={keystore}: not a PEM key and "
                            f"certificate chain ({e})") from None
    return ctx


def _client_context(truststore: str, check_hostname: bool) -> ssl.SSLContext:
    """Trusts the truststore's CAs (the system's when none is given)."""
    try:
        ctx = ssl.create_default_context(cafile=truststore or None)
    except (OSError, ssl.SSLError) as e:
        raise SecurityError(f"ssl.truststore.location={truststore}: not PEM "
                            f"CA certificates ({e})") from None
    ctx.check_hostname = check_hostname
    return ctx


@dataclass(frozen=True)
class BrokerSecurity:
    protocol: str = "PLAINTEXT"
    mechanisms: tuple[str, ...] = ()
    inter_broker_mechanism: str = "SCRAM-SHA-512"
    username: str = ""
    password: str = field(default="", repr=False)
    # With TLS: the listener's context, and the one this broker connects to
    # others with; made once, in from_config.
    server_ssl: ssl.SSLContext | None = field(default=None, repr=False, compare=False)
    client_ssl: ssl.SSLContext | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_config(cls, cfg: Any) -> "BrokerSecurity":
        """SecurityError naming the key when a file cannot be read or used."""
        protocol = cfg["security.inter.broker.protocol"]
        password = ""
        if sasl.uses_sasl(protocol):
            path = cfg["sasl.inter.broker.password.file"]
            try:
                password = Path(path).read_text().strip()
            except OSError as e:
                raise SecurityError(f"sasl.inter.broker.password.file={path}: {e.strerror}") from None
            if not password:
                raise SecurityError(f"sasl.inter.broker.password.file={path} is empty")
        server_ssl = client_ssl = None
        if sasl.uses_tls(protocol):
            for key in ("ssl.keystore.location", "ssl.truststore.location"):
                if cfg[key] and not Path(cfg[key]).is_file():
                    raise SecurityError(f"{key}={cfg[key]}: no such file")
            server_ssl = _server_context(cfg["ssl.keystore.location"])
            client_ssl = _client_context(
                cfg["ssl.truststore.location"],
                cfg["ssl.endpoint.identification.algorithm"].lower() == "https")
        return cls(protocol, cfg.sasl_mechanisms, cfg["sasl.mechanism.inter.broker.protocol"],
                   cfg["sasl.inter.broker.username"], password, server_ssl, client_ssl)

    @property
    def sasl(self) -> bool:
        return sasl.uses_sasl(self.protocol)

    # -- broker-to-broker connections ------------------------------------------------------

    async def open_async(self, host: str, port: int, timeout_s: float
                         ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A stream to another broker, TLS where the protocol has it; the
        caller authenticates on it (authenticate_async)."""
        ctx = self.client_ssl
        return await asyncio.wait_for(asyncio.open_connection(
            host, port, ssl=ctx, server_hostname=host if ctx else None), timeout_s)

    async def authenticate_async(self, roundtrip: sasl.AsyncRoundtrip) -> None:
        """SASL as this broker's own user, where the protocol has it."""
        if self.sasl:
            await sasl.authenticate_async(roundtrip, self.inter_broker_mechanism, self.username,
                                          self.password)

    def connect(self, addr: tuple[str, int], connect_timeout_s: float, client_id: bytes
                ) -> socket.socket:
        """A blocking socket to another broker: TLS, then SASL."""
        s = socket.create_connection(addr, timeout=connect_timeout_s)
        try:
            if self.client_ssl is not None:
                s = self.client_ssl.wrap_socket(s, server_hostname=addr[0])
            if self.sasl:
                sasl.authenticate(socket_roundtrip(s, client_id), self.inter_broker_mechanism,
                                  self.username, self.password)
        except BaseException:
            s.close()
            raise
        return s


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


PLAINTEXT = BrokerSecurity()
