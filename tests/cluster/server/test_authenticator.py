"""cluster/server/authenticator.py: one connection's SASL state machine,
driven by the client side of cluster/protocol/sasl.py (pure: no sockets)."""
from __future__ import annotations

import struct

import pytest

from cluster.protocol import errors as E
from cluster.protocol import sasl
from cluster.security import request_frame
from cluster.server.authenticator import (MAX_RECEIVE_BYTES, PASS, FinalResponse,
                                          SaslAuthenticator)
from cluster.server.kafka_apis import CLOSE
from cluster.server.sasl import make_credential

CREDS = {(u, m): make_credential(m, f"{u}-pw") for u in ("alice", "bob")
         for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _auth() -> SaslAuthenticator:
    return SaslAuthenticator(MECHANISMS, lambda u, m: CREDS.get((u, m)))


def _driver(auth: SaslAuthenticator, answers: list):
    """A roundtrip through the authenticator; `answers` keeps what it returned."""
    def roundtrip(api_key, version, body):
        out = auth.handle(request_frame(api_key, version, 7, b"t", body)[4:])
        answers.append(out)
        if out is CLOSE or out is PASS:
            raise ConnectionError(f"not answered: {out}")
        return bytes(out)[8:]   # size and correlation id
    return roundtrip


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_each_mechanism_authenticates_and_then_requests_pass(mechanism):
    auth, answers = _auth(), []
    sasl.authenticate(_driver(auth, answers), mechanism, "alice", "alice-pw")
    assert auth.authenticated and auth.principal == "alice"
    assert not any(isinstance(a, FinalResponse) for a in answers)
    assert auth.handle(request_frame(3, 0, 1, b"t", struct.pack(">i", -1))[4:]) is PASS
    assert auth.max_frame_bytes is None


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_is_answered_then_the_connection_closes(mechanism):
    auth, answers = _auth(), []
    with pytest.raises(sasl.SaslError, match="Authentication failed"):
        sasl.authenticate(_driver(auth, answers), mechanism, "alice", "bob-pw")
    assert isinstance(answers[-1], FinalResponse)
    assert not auth.authenticated


def test_only_api_versions_passes_before_authentication():
    auth = _auth()
    assert auth.handle(request_frame(18, 0, 1, b"t", b"")[4:]) is PASS
    assert auth.max_frame_bytes == MAX_RECEIVE_BYTES
    for api_key in (0, 1, 3, 19, 0x7FFF):   # Produce, Fetch, Metadata, CreateTopics, unknown
        assert _auth().handle(request_frame(api_key, 0, 1, b"t", b"")[4:]) is CLOSE
    assert _auth().handle(b"\x00") is CLOSE    # not even a header


def test_an_unknown_mechanism_is_refused_with_the_enabled_ones():
    out = _auth().handle(request_frame(17, 1, 1, b"t", struct.pack(">h", 6) + b"GSSAPI")[4:])
    assert isinstance(out, FinalResponse)
    assert struct.unpack(">h", out[8:10])[0] == E.UNSUPPORTED_SASL_MECHANISM
    assert b"SCRAM-SHA-512" in out


def test_authenticate_before_handshake_and_a_second_handshake_are_illegal_states():
    out = _auth().handle(request_frame(36, 1, 1, b"t", struct.pack(">i", 3) + b"abc")[4:])
    assert isinstance(out, FinalResponse) and struct.unpack(">h", out[8:10])[0] == E.ILLEGAL_SASL_STATE
    auth = _auth()
    hs = request_frame(17, 1, 1, b"t", struct.pack(">h", 5) + b"PLAIN")[4:]
    assert not isinstance(auth.handle(hs), FinalResponse)
    out = auth.handle(hs)
    assert isinstance(out, FinalResponse) and struct.unpack(">h", out[8:10])[0] == E.ILLEGAL_SASL_STATE


def test_malformed_sasl_requests_close_the_connection():
    assert _auth().handle(request_frame(17, 1, 1, b"t", b"\x00")[4:]) is CLOSE   # cut short
    out = _auth().handle(request_frame(17, 1, 1, b"t", b"\xff\xfe")[4:])   # a null mechanism
    assert isinstance(out, FinalResponse)
    assert _auth().handle(request_frame(17, 9, 1, b"t", b"")[4:]) is CLOSE   # no such version


def test_re_authentication_keeps_the_user_and_the_mechanism():
    auth, answers = _auth(), []
    sasl.authenticate(_driver(auth, answers), "SCRAM-SHA-256", "alice", "alice-pw")
    sasl.authenticate(_driver(auth, answers), "SCRAM-SHA-256", "alice", "alice-pw")
    assert auth.authenticated and auth.principal == "alice"
    with pytest.raises(sasl.SaslError, match="another user"):
        sasl.authenticate(_driver(auth, answers), "SCRAM-SHA-256", "bob", "bob-pw")
    assert isinstance(answers[-1], FinalResponse)

    auth = _auth()
    sasl.authenticate(_driver(auth, []), "PLAIN", "alice", "alice-pw")
    with pytest.raises(sasl.SaslError):   # another mechanism: refused
        sasl.authenticate(_driver(auth, []), "SCRAM-SHA-512", "alice", "alice-pw")


def test_while_re_authenticating_other_requests_close_the_connection():
    auth = _auth()
    sasl.authenticate(_driver(auth, []), "PLAIN", "alice", "alice-pw")
    auth.handle(request_frame(17, 1, 1, b"t", struct.pack(">h", 5) + b"PLAIN")[4:])
    assert auth.handle(request_frame(3, 0, 1, b"t", struct.pack(">i", -1))[4:]) is CLOSE


def test_handshake_v0_takes_the_tokens_as_raw_frames():
    auth = _auth()
    auth.handle(request_frame(17, 0, 1, b"t", struct.pack(">h", 5) + b"PLAIN")[4:])
    assert auth.handle(b"\0alice\0alice-pw") == struct.pack(">i", 0)
    assert auth.authenticated
    auth = _auth()
    auth.handle(request_frame(17, 0, 1, b"t", struct.pack(">h", 5) + b"PLAIN")[4:])
    assert auth.handle(b"\0alice\0wrong") is CLOSE
