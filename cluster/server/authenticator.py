"""One connection's SASL authentication on a SASL listener
(docs/design.md#security), as Kafka's SaslServerAuthenticator does it.

Until the client is authenticated, a connection may send ApiVersions, then
SaslHandshake (which mechanism), then SaslAuthenticate rounds carrying the
mechanism's tokens (cluster/server/sasl.py checks them). Anything else
closes the connection, and so does a refused mechanism or credential, right
after the answer that says so. A frame before authentication may be at most
MAX_RECEIVE_BYTES (Kafka's sasl.server.max.receive.size), so an
unauthenticated peer cannot make the broker buffer a large request.

Once authenticated, a SaslHandshake starts re-authentication (KIP-368): the
same mechanism and the same user, or the connection closes; other requests
wait for no one during it: they close the connection.
"""
from __future__ import annotations

import logging
import struct
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from cluster.protocol import api
from cluster.protocol import errors as E
from cluster.protocol.frame import SIZE, ProtocolError, frame_response, parse_request_header
from cluster.server.kafka_apis import CLOSE
from cluster.server.sasl import PLAIN, AuthenticationError, Lookup, PlainServer, ScramServer

log = logging.getLogger(__name__)

MAX_RECEIVE_BYTES = 512 * 1024
_KEY = struct.Struct(">h")
PASS = object()    # not the authenticator's request: KafkaApis serves it


def _api_key(frame) -> int | None:
    return _KEY.unpack_from(frame)[0] if len(frame) >= 2 else None


class FinalResponse(bytes):
    """A response after which the connection closes."""


def refusal(api_key: int, error: int, mechanisms: tuple[str, ...] = (), message: str | None = None):
    """The answer to a SASL request refused with `error`."""
    if api_key == api.SASL_HANDSHAKE:
        return SaslHandshakeResponse(error_code=error, mechanisms=list(mechanisms))
    return SaslAuthenticateResponse(error_code=error, error_message=message, auth_bytes=b"",
                                    session_lifetime_ms=0)


class SaslAuthenticator:
    """States: handshake -> authenticate -> authenticated; a SaslHandshake on
    an authenticated connection goes back to authenticate (re-authentication)."""

    def __init__(self, mechanisms: tuple[str, ...], lookup: Lookup, peer: Any = None):
        self.mechanisms = tuple(mechanisms)
        self.lookup = lookup
        self.peer = peer
        self.state = "handshake"
        self.mechanism: str | None = None
        self.principal: str | None = None   # the user, once authenticated
        self.raw = False                    # after handshake v0: tokens come as raw frames
        self._server: PlainServer | ScramServer | None = None

    @property
    def authenticated(self) -> bool:
        return self.state == "authenticated"

    @property
    def max_frame_bytes(self) -> int | None:
        return None if self.authenticated else MAX_RECEIVE_BYTES

    def handle(self, frame) -> Any:
        """bytes or a FinalResponse to send, CLOSE, or PASS for KafkaApis."""
        if self.raw:
            return self._raw_token(bytes(frame))
        if self.authenticated and _api_key(frame) not in api.SASL_APIS:
            return PASS   # the hot path: KafkaApis parses the header itself
        try:
            hdr = parse_request_header(frame)
        except ProtocolError:
            return PASS if self.authenticated else CLOSE   # KafkaApis logs and closes
        key = hdr.api_key
        if key in api.SASL_APIS:
            try:
                req = api.decode_request(key, hdr.api_version, frame, hdr.body_offset)
            except ProtocolError as e:
                log.warning("%s: malformed %s: %s; closing the connection",
                            self.peer, api.NAMES[key], e)
                return CLOSE
            if key == api.SASL_HANDSHAKE:
                return self._handshake(hdr, req.mechanism)
            return self._authenticate(hdr, bytes(req.auth_bytes))
        if self.authenticated or (key == api.API_VERSIONS and self.state == "handshake"
                                  and self.principal is None):
            return PASS
        log.warning("%s: %s request before SASL authentication; closing the connection",
                    self.peer, api.NAMES.get(key, f"api key {key}"))
        return CLOSE

    def _answer(self, hdr, response, final: bool = False) -> bytes:
        out = frame_response(hdr.correlation_id,
                             api.encode_response(hdr.api_key, hdr.api_version, response))
        return FinalResponse(out) if final else out

    def _refuse(self, hdr, error: int, why: str, message: str | None = None) -> bytes:
        log.warning("%s: SASL refused (%s): %s; closing the connection",
                    self.peer, E.name(error), why)
        return self._answer(hdr, refusal(hdr.api_key, error, self.mechanisms, message), final=True)

    def _handshake(self, hdr, mechanism: str) -> bytes:
        reauthenticating = self.principal is not None
        if self.state not in ("handshake", "authenticated"):
            return self._refuse(hdr, E.ILLEGAL_SASL_STATE, f"SaslHandshake in state {self.state}")
        if mechanism not in self.mechanisms:
            return self._refuse(hdr, E.UNSUPPORTED_SASL_MECHANISM,
                                f"mechanism {mechanism!r} is not enabled")
        if reauthenticating and (mechanism != self.mechanism or hdr.api_version == 0):
            return self._refuse(hdr, E.ILLEGAL_SASL_STATE,
                                "re-authentication needs the same mechanism and SaslHandshake v1")
        self.mechanism = mechanism
        self._server = (PlainServer(self.lookup) if mechanism == PLAIN
                        else ScramServer(mechanism, self.lookup))
        self.state = "authenticate"
        self.raw = hdr.api_version == 0
        return self._answer(hdr, SaslHandshakeResponse(error_code=E.NONE,
                                                       mechanisms=list(self.mechanisms)))

    def _step(self, token: bytes) -> bytes:
        """One token through the mechanism; AuthenticationError when refused."""
        out = self._server.respond(token) or b""
        user = self._server.user
        if user is not None:
            if self.principal is not None and user != self.principal:
                raise AuthenticationError("re-authentication as another user")
            self.principal, self.state, self._server = user, "authenticated", None
            log.debug("%s: authenticated as %s with %s", self.peer, user, self.mechanism)
        return out

    def _authenticate(self, hdr, token: bytes) -> bytes:
        if self.state != "authenticate" or self.raw:
            return self._refuse(hdr, E.ILLEGAL_SASL_STATE, f"SaslAuthenticate in state {self.state}")
        try:
            out = self._step(token)
        except AuthenticationError as e:
            return self._refuse(hdr, E.SASL_AUTHENTICATION_FAILED, str(e), str(e))
        return self._answer(hdr, SaslAuthenticateResponse(
            error_code=E.NONE, error_message=None, auth_bytes=out, session_lifetime_ms=0))

    def _raw_token(self, token: bytes) -> Any:
        """Handshake v0: each frame is a token, each answer a size and a token."""
        try:
            out = self._step(token)
        except AuthenticationError as e:
            log.warning("%s: SASL refused: %s; closing the connection", self.peer, e)
            return CLOSE
        if self.authenticated:
            self.raw = False
        return SIZE.pack(len(out)) + out
