"""SASL on the broker's side: PLAIN and SCRAM-SHA-256/512 (RFC 5802), and
SCRAM credentials as Kafka stores them (docs/design.md#security).

Being built (issue 39): the mechanisms and the credential format, not yet a
listener that uses them. A SCRAM credential is what Kafka keeps in
ZooKeeper under /config/users/<user>, one per mechanism:
"salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>". The
password itself is never stored: PLAIN is checked against the SCRAM-SHA-512
(else -256) credential of the user, by deriving the stored key from the
given password. Every failure says only "Authentication failed" to the
client: which of user or password was wrong is not told.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from typing import Callable

MECHANISMS = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
PLAIN = "PLAIN"
DEFAULT_ITERATIONS = 4096          # Kafka's default for kafka-configs
MIN_ITERATIONS = 4096              # Kafka's ScramMechanism minimum
FAILED = "Authentication failed: invalid username or password"


class AuthenticationError(Exception):
    """SASL_AUTHENTICATION_FAILED; the message is what the client may be told."""


class SaslProtocolError(AuthenticationError):
    """A message that does not follow the mechanism (malformed, out of order)."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_config(self) -> str:
        b64 = lambda b: base64.b64encode(b).decode()   # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
                f"server_key={b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_config(cls, text: str) -> ScramCredential:
        try:
            fields = dict(part.split("=", 1) for part in text.split(","))
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True),
                       int(fields["iterations"]))
        except (ValueError, KeyError) as e:
            raise ValueError(f"not a SCRAM credential (salt=...,stored_key=...,server_key=...,"
                             f"iterations=N): {type(e).__name__} {e}") from None


def _hmac(hash_fn, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_fn).digest()


def _keys(mechanism: str, password: bytes, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(stored key, server key) of `password` (RFC 5802 section 3)."""
    hash_fn = MECHANISMS[mechanism]
    salted = hashlib.pbkdf2_hmac(hash_fn().name, password, salt, iterations)
    return hash_fn(_hmac(hash_fn, salted, b"Client Key")).digest(), _hmac(hash_fn, salted, b"Server Key")


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}; use one of {sorted(MECHANISMS)}")
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"{iterations} iterations: at least {MIN_ITERATIONS}, as Kafka asks")
    salt = salt if salt is not None else os.urandom(32)
    stored, server = _keys(mechanism, password.encode(), salt, iterations)
    return ScramCredential(salt, stored, server, iterations)


Lookup = Callable[[str, str], "ScramCredential | None"]   # (user, mechanism) -> credential


class PlainServer:
    """PLAIN: one message, authzid NUL user NUL password."""

    def __init__(self, lookup: Lookup):
        self.lookup = lookup
        self.user: str | None = None

    def respond(self, message: bytes) -> bytes | None:
        parts = message.split(b"\0")
        if len(parts) != 3 or not parts[1] or not parts[2]:
            raise SaslProtocolError("PLAIN: expected authzid NUL username NUL password")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise SaslProtocolError("PLAIN: the message is not UTF-8") from None
        if authzid and authzid != user:
            raise AuthenticationError("PLAIN: the authorization id must be the username")
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            cred = self.lookup(user, mechanism)
            if cred is not None:
                stored, _server = _keys(mechanism, password.encode(), cred.salt, cred.iterations)
                if hmac.compare_digest(stored, cred.stored_key):
                    self.user = user
                    return None
                break
        raise AuthenticationError(FAILED)


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslProtocolError(f"{what}: {part!r} is not an attribute (x=value)")
        out.append((part[0], part[2:]))
    return out


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise SaslProtocolError("SCRAM: a username with a bad escape")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """SCRAM-SHA-256/512, server side: client-first -> server-first,
    client-final -> server-final (RFC 5802, no channel binding)."""

    def __init__(self, mechanism: str, lookup: Lookup, nonce: bytes | None = None):
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        self.mechanism = mechanism
        self.hash = MECHANISMS[mechanism]
        self.lookup = lookup
        # Alphanumeric, as Kafka's: some clients mis-parse a nonce with '+' or '/'.
        self.server_nonce = (nonce or secrets.token_hex(16).encode()).decode()
        self.state = "client-first"
        self.user: str | None = None

    def respond(self, message: bytes) -> bytes:
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise SaslProtocolError("SCRAM: the message is not UTF-8") from None
        if self.state == "client-first":
            return self._first(text)
        if self.state == "client-final":
            return self._final(text)
        raise SaslProtocolError(f"SCRAM: no message expected after the exchange ({self.state})")

    def _first(self, text: str) -> bytes:
        if not text.startswith(("n,", "y,")):
            raise SaslProtocolError("SCRAM: channel binding is not supported (gs2 header n,, or y,,)")
        gs2, _, bare = text.partition(",")[2].partition(",")
        if gs2:
            raise SaslProtocolError("SCRAM: an authorization id is not supported")
        attrs = dict(_attributes(bare, "client-first"))
        if "n" not in attrs or "r" not in attrs or "m" in attrs:
            raise SaslProtocolError("SCRAM: client-first needs n= and r=")
        user = _unescape_name(attrs["n"])
        self.cred = self.lookup(user, self.mechanism)
        if self.cred is None:
            self.state = "failed"
            raise AuthenticationError(FAILED)
        self.user_candidate = user
        self.nonce = attrs["r"] + self.server_nonce
        server_first = (f"r={self.nonce},s={base64.b64encode(self.cred.salt).decode()},"
                        f"i={self.cred.iterations}")
        self.auth_head = f"{bare},{server_first}"
        self.state = "client-final"
        return server_first.encode()

    def _final(self, text: str) -> bytes:
        self.state = "failed"
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise SaslProtocolError("SCRAM: client-final needs p=")
        attrs = dict(_attributes(without_proof, "client-final"))
        if attrs.get("c") != "biws":
            raise SaslProtocolError("SCRAM: unexpected channel binding in client-final")
        # Kafka accepts a nonce that ends with the server-first one:
        # librdkafka 2.0 sends its own nonce again in front of it.
        if not attrs.get("r", "").endswith(self.nonce):
            raise SaslProtocolError("SCRAM: the nonce does not match")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise SaslProtocolError("SCRAM: the proof is not base64") from None
        auth_message = f"{self.auth_head},{without_proof}".encode()
        signature = _hmac(self.hash, self.cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationError(FAILED)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(self.hash(client_key).digest(), self.cred.stored_key):
            raise AuthenticationError(FAILED)
        self.state = "done"
        self.user = self.user_candidate
        verifier = _hmac(self.hash, self.cred.server_key, auth_message)
        return f"v={base64.b64encode(verifier).decode()}".encode()
