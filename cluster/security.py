"""A broker's security, from its config (docs/design.md#security): the
protocol of its one listener, which it also speaks to the other brokers;
the TLS contexts; the SASL mechanisms it enables; and the user it
authenticates as when it connects to another broker.

`connect_async` and `connect` open those broker-to-broker connections (the
fetchers' and transaction markers' asyncio streams, the controller's
blocking sockets): TLS first where the protocol has it, then SASL.
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


@dataclass(frozen=True)
class BrokerSecurity:
    protocol: str = "PLAINTEXT"
    mechanisms: tuple[str, ...] = ()
    inter_broker_mechanism: str = "SCRAM-SHA-512"
    username: str = ""
    password: str = field(default="", repr=False)
    keystore: str = ""
    truststore: str = ""
    check_hostname: bool = True

    @classmethod
    def from_config(cls, cfg: Any) -> "BrokerSecurity":
        """SecurityError naming the key when a file cannot be read or used
        (the TLS contexts are made once here to find out)."""
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
        for key in ("ssl.keystore.location", "ssl.truststore.location"):
            if sasl.uses_tls(protocol) and cfg[key] and not Path(cfg[key]).is_file():
                raise SecurityError(f"{key}={cfg[key]}: no such file")
        security = cls(protocol, cfg.sasl_mechanisms, cfg["sasl.mechanism.inter.broker.protocol"],
                       cfg["sasl.inter.broker.username"], password, cfg["ssl.keystore.location"],
                       cfg["ssl.truststore.location"],
                       cfg["ssl.endpoint.identification.algorithm"].lower() == "https")
        security.server_ssl_context()
        security.client_ssl_context()
        return security

    @property
    def sasl(self) -> bool:
        return sasl.uses_sasl(self.protocol)

    def server_ssl_context(self) -> ssl.SSLContext | None:
        if not sasl.uses_tls(self.protocol):
            return None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ctx.load_cert_chain(self.keystore)
        except (OSError, ssl.SSLError) as e:
            raise SecurityError(f"ssl.keystore.location={self.keystore}: not a PEM key and "
                              f"certificate chain ({e})") from None
        return ctx

    def client_ssl_context(self) -> ssl.SSLContext | None:
        """The context this broker connects to others with: it trusts the
        truststore's CAs (the system's when none is given)."""
        if not sasl.uses_tls(self.protocol):
            return None
        try:
            ctx = ssl.create_default_context(cafile=self.truststore or None)
        except (OSError, ssl.SSLError) as e:
            raise SecurityError(f"ssl.truststore.location={self.truststore}: not PEM "
                              f"CA certificates ({e})") from None
        ctx.check_hostname = self.check_hostname
        return ctx

    # -- broker-to-broker connections ------------------------------------------------------

    async def connect_async(self, host: str, port: int, client_id: bytes, timeout_s: float
                            ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        ctx = self.client_ssl_context()
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            host, port, ssl=ctx, server_hostname=host if ctx else None), timeout_s)
        if self.sasl:
            corr = iter(range(1, 1 << 31))

            async def roundtrip(api_key: int, version: int, body: bytes) -> bytes:
                writer.write(request_frame(api_key, version, next(corr), client_id, body))
                await writer.drain()
                (n,) = _SIZE.unpack(await reader.readexactly(4))
                return (await reader.readexactly(n))[4:]
            try:
                await asyncio.wait_for(sasl.authenticate_async(
                    roundtrip, self.inter_broker_mechanism, self.username, self.password), timeout_s)
            except BaseException:
                writer.close()
                raise
        return reader, writer

    def connect(self, addr: tuple[str, int], connect_timeout_s: float, client_id: bytes
                ) -> socket.socket:
        s = socket.create_connection(addr, timeout=connect_timeout_s)
        try:
            ctx = self.client_ssl_context()
            if ctx is not None:
                s = ctx.wrap_socket(s, server_hostname=addr[0])
            if self.sasl:
                corr = iter(range(1, 1 << 31))

                def roundtrip(api_key: int, version: int, body: bytes) -> bytes:
                    s.sendall(request_frame(api_key, version, next(corr), client_id, body))
                    (n,) = _SIZE.unpack(_recv_exact(s, 4))
                    return _recv_exact(s, n)[4:]
                sasl.authenticate(roundtrip, self.inter_broker_mechanism, self.username,
                                  self.password)
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
