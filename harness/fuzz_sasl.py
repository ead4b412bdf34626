"""The fuzzer's attacks on SASL authentication (`chaoslog fuzz --security
SASL_SSL`; docs/design.md#security). Pure: a seeded random stream in, the
frames of one connection out.

Every case is a short conversation that must NOT end authenticated, then a
Metadata request (the probe). What must hold: the probe is never answered
(no access), and the broker keeps serving a fresh, correctly authenticated
client (harness/fuzz.py's health checks). The attacks:

  early       requests before any authentication (Metadata, Produce,
              a controller request), after an ApiVersions
  mechanism   a handshake naming an unknown, empty, huge or null mechanism
  token       a handshake, then a bad token: a wrong password (PLAIN, with
              the real user), a SCRAM client-first with junk, a client-final
              with a made-up nonce and proof, random bytes
  order       SaslAuthenticate before the handshake, two handshakes,
              handshake v0 with a raw junk token
  oversized   a token frame far beyond what is allowed before authentication
  reauth      a correct PLAIN authentication, then re-authentication as
              another user or with a wrong password (KIP-368), then the probe

The correct credential (for `reauth`) comes from the harness's own settings;
a case's description never holds it.
"""
from __future__ import annotations

import random
import struct

SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA, API_VERSIONS, PRODUCE = 17, 36, 3, 18, 0
LEADER_AND_ISR = 4
ATTACKS = {"early": 15, "mechanism": 15, "token": 30, "order": 15, "oversized": 10, "reauth": 15}
TOO_LARGE = 600 * 1024   # beyond the broker's 512 KiB before authentication

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")


def _frame(api_key: int, version: int, corr: int, body: bytes) -> bytes:
    head = _HEADER.pack(api_key, version, corr, 4) + b"fuzz"
    return _SIZE.pack(len(head) + len(body)) + head + body


def _string(s: bytes) -> bytes:
    return struct.pack(">h", len(s)) + s


def _bytes(b: bytes) -> bytes:
    return _SIZE.pack(len(b)) + b


def _handshake(corr: int, mechanism: bytes, version: int = 1) -> bytes:
    return _frame(SASL_HANDSHAKE, version, corr, _string(mechanism))


def _token(corr: int, token: bytes) -> bytes:
    return _frame(SASL_AUTHENTICATE, 1, corr, _bytes(token))


def probe(corr: int) -> bytes:
    """Metadata v1 for every topic: answered only on an authenticated connection."""
    return _frame(METADATA, 1, corr, _SIZE.pack(-1))


def attack(rng: random.Random, corr: int, user: str, password: str) -> tuple[str, list[bytes]]:
    """(what, frames before the probe) of one case; correlation ids from `corr` on."""
    kind = rng.choices(list(ATTACKS), weights=list(ATTACKS.values()))[0]
    u = user.encode()
    if kind == "early":
        first = rng.choice([_frame(API_VERSIONS, 0, corr, b""), b""])
        request = rng.choice([("Metadata", _frame(METADATA, 1, corr + 1, _SIZE.pack(-1))),
                              ("Produce", _frame(PRODUCE, 3, corr + 1, rng.randbytes(40))),
                              ("LeaderAndIsr", _frame(LEADER_AND_ISR, 1, corr + 1,
                                                      rng.randbytes(30)))])
        return f"early: {request[0]} before authentication", [f for f in (first, request[1]) if f]
    if kind == "mechanism":
        name = rng.choice([b"GSSAPI", b"", b"plain", b"SCRAM-SHA-1", b"X" * 2000,
                           rng.randbytes(rng.randint(1, 40))])
        body = _string(name) if rng.random() < 0.8 else struct.pack(">h", -1)
        return (f"mechanism: {name[:20]!r}{'...' if len(name) > 20 else ''}",
                [_frame(SASL_HANDSHAKE, 1, corr, body)])
    if kind == "token":
        mechanism = rng.choice([b"PLAIN", b"SCRAM-SHA-256", b"SCRAM-SHA-512"])
        nonce = rng.randbytes(8).hex().encode()
        plain = rng.choice([b"\0" + u + b"\0" + password.encode() + rng.choice([b"x", b" "]),
                            b"\0" + u + b"\0", b"\0" + u, b"\0\0", u + b"\0" + u + b"\0x",
                            rng.randbytes(30)])
        scram = [rng.choice([b"n,,n=" + u + b",r=" + nonce, b"p,,n=" + u + b",r=" + nonce,
                             rng.randbytes(20)]),
                 b"c=biws,r=" + nonce + b"made-up,p=" + b"A" * 44]
        tokens = {b"PLAIN": [plain], b"SCRAM-SHA-256": scram}
        tokens[b"SCRAM-SHA-512"] = tokens[b"SCRAM-SHA-256"]
        frames = [_handshake(corr, mechanism)]
        frames += [_token(corr + 1 + i, t) for i, t in enumerate(tokens[mechanism])]
        return f"token: a bad {mechanism.decode()} exchange", frames
    if kind == "order":
        choice = rng.randrange(3)
        if choice == 0:
            return "order: SaslAuthenticate before the handshake", [
                _token(corr, b"\0" + u + b"\0" + password.encode())]
        if choice == 1:
            return "order: two handshakes", [_handshake(corr, b"PLAIN"),
                                             _handshake(corr + 1, b"PLAIN")]
        return "order: handshake v0, then a raw junk token", [
            _handshake(corr, b"PLAIN", version=0), _bytes(rng.randbytes(rng.randint(0, 64)))]
    if kind == "oversized":
        return "oversized: a token frame beyond 512 KiB", [
            _handshake(corr, b"PLAIN"),
            _SIZE.pack(TOO_LARGE) + _HEADER.pack(SASL_AUTHENTICATE, 1, corr + 1, 0)
            + rng.randbytes(1024)]
    other = rng.choice([("another user", b"\0mallory\0" + password.encode()),
                        ("a wrong password", b"\0" + u + b"\0" + password.encode() + b"!"),
                        ("another mechanism", None)])
    frames = [_handshake(corr, b"PLAIN"), _token(corr + 1, b"\0" + u + b"\0" + password.encode())]
    if other[1] is None:
        frames.append(_handshake(corr + 2, b"SCRAM-SHA-512"))
    else:
        frames += [_handshake(corr + 2, b"PLAIN"), _token(corr + 3, other[1])]
    return f"reauth: re-authentication with {other[0]}", frames
