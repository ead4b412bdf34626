"""SASL, the client's side of a connection: SaslHandshake v1, then
SaslAuthenticate v1 rounds (docs/design.md#security).

Used by the brokers' own connections to each other (fetchers, the
controller's channels, transaction markers) and by the harness's wire
client. `exchange` is the whole conversation as a generator of requests,
so that a blocking socket and an asyncio stream drive the same steps
(`authenticate` and `authenticate_async`). SCRAM's client arithmetic is
kafka-python's (checked against the broker's in tests/cluster/server/test_sasl.py).
"""
from __future__ import annotations

import struct
from typing import Awaitable, Callable, Generator

from kafka.net.sasl.scram import ScramClient

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
HANDSHAKE_VERSION = 1      # v1: the tokens go in SaslAuthenticate requests (v0: raw frames)
AUTHENTICATE_VERSION = 1   # v1 answers a session lifetime (KIP-368)
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

# (api_key, version, body) -> response body (after the correlation id)
Roundtrip = Callable[[int, int, bytes], bytes]
AsyncRoundtrip = Callable[[int, int, bytes], Awaitable[bytes]]


class SaslError(ConnectionError):
    """The broker refused the mechanism or the credentials; the connection
    is no use any more (the broker closes it)."""


def uses_sasl(protocol: str) -> bool:
    return protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def uses_tls(protocol: str) -> bool:
    return protocol in ("SSL", "SASL_SSL")


def _string(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SaslError("a SASL response cut short")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return _I16.unpack(self.take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self.take(4))[0]

    def string(self) -> str | None:
        n = self.int16()
        return None if n == -1 else self.take(n).decode(errors="replace")

    def bytes_(self) -> bytes:
        return self.take(self.int32())


def _tokens(mechanism: str, username: str, password: str) -> Generator[bytes, bytes, None]:
    """The mechanism's client messages, each sent the server's answer to the last."""
    if mechanism == "PLAIN":
        yield b"\0" + username.encode() + b"\0" + password.encode()
        return
    client = ScramClient(username, password, mechanism)
    server_first = yield client.first_message()
    try:
        client.process_server_first_message(server_first)
    except (ValueError, KeyError) as e:
        raise SaslError(f"SCRAM: a malformed server-first message ({e})") from None
    server_final = yield client.final_message()
    try:
        client.process_server_final_message(server_final)
    except (ValueError, KeyError) as e:
        raise SaslError(f"SCRAM: the broker did not prove it knows the credential ({e})") from None


def exchange(mechanism: str, username: str, password: str
             ) -> Generator[tuple[int, int, bytes], bytes, None]:
    """Yields the requests (api key, version, body) of one authentication;
    is sent each response's body. Raises SaslError when the broker refuses."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SASL mechanism {mechanism!r}: use one of {', '.join(MECHANISMS)}")
    r = _Reader((yield SASL_HANDSHAKE, HANDSHAKE_VERSION, _string(mechanism)))
    error = r.int16()
    enabled = [r.string() for _ in range(r.int32())]
    if error:
        raise SaslError(f"the broker does not enable SASL mechanism {mechanism} "
                        f"(error {error}; enabled: {', '.join(map(str, enabled)) or 'none'})")
    tokens = _tokens(mechanism, username, password)
    answer = None
    while True:
        try:
            token = tokens.send(answer)
        except StopIteration:
            return
        r = _Reader((yield SASL_AUTHENTICATE, AUTHENTICATE_VERSION, _I32.pack(len(token)) + token))
        error, message, answer = r.int16(), r.string(), r.bytes_()
        if error:
            raise SaslError(f"SASL authentication failed: {message or f'error {error}'}")


def authenticate(roundtrip: Roundtrip, mechanism: str, username: str, password: str) -> None:
    steps = exchange(mechanism, username, password)
    response = None
    while True:
        try:
            request = steps.send(response)
        except StopIteration:
            return
        response = roundtrip(*request)


async def authenticate_async(roundtrip: AsyncRoundtrip, mechanism: str, username: str,
                             password: str) -> None:
    steps = exchange(mechanism, username, password)
    response = None
    while True:
        try:
            request = steps.send(response)
        except StopIteration:
            return
        response = await roundtrip(*request)
