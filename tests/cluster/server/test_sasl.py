"""cluster/server/sasl.py: PLAIN and SCRAM on the broker's side, against
RFC 7677's exchange and kafka-python's own SCRAM client."""
from __future__ import annotations

import base64

import pytest
from kafka.net.sasl.scram import ScramClient

from cluster.server.sasl import (FAILED, AuthenticationError, PlainServer, SaslProtocolError,
                                 ScramCredential, ScramServer, make_credential)

USERS = {}


def lookup(user, mechanism):
    return USERS.get((user, mechanism))


@pytest.fixture(autouse=True)
def alice():
    USERS.clear()
    for m in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        USERS[("alice", m)] = make_credential(m, "s3cret")


def test_rfc_7677_s_exchange_byte_for_byte():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    USERS[("user", "SCRAM-SHA-256")] = make_credential("SCRAM-SHA-256", "pencil", 4096, salt)
    s = ScramServer("SCRAM-SHA-256", lookup, nonce=b"%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    assert s.respond(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        f"r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode())
    assert s.respond(f"c=biws,r={nonce},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode()) == (
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert s.user == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_s_scram_client_authenticates(mechanism):
    client = ScramClient("alice", "s3cret", mechanism)
    server = ScramServer(mechanism, lookup)
    client.process_server_first_message(server.respond(client.first_message()))
    client.process_server_final_message(server.respond(client.final_message()))  # checks v=
    assert server.user == "alice"


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("mallory", "s3cret")])
def test_a_wrong_password_or_user_fails_without_saying_which(user, password):
    client = ScramClient(user, password, "SCRAM-SHA-256")
    server = ScramServer("SCRAM-SHA-256", lookup)
    with pytest.raises(AuthenticationError) as e:
        client.process_server_first_message(server.respond(client.first_message()))
        server.respond(client.final_message())
    assert str(e.value) == FAILED and server.user is None
    with pytest.raises(SaslProtocolError, match="no message expected"):
        server.respond(b"c=biws")


@pytest.mark.parametrize("first", [b"p=tls-unique,,n=alice,r=x", b"n,a=admin,n=alice,r=x",
                                   b"n,,r=x", b"n,,n=alice", b"n,,garbage", b"\xff\xfe",
                                   b"n,,n=ali=ce,r=x"])
def test_a_malformed_client_first_is_refused(first):
    with pytest.raises(SaslProtocolError):
        ScramServer("SCRAM-SHA-256", lookup).respond(first)


def test_a_client_final_with_another_nonce_or_binding_is_refused():
    for final in (b"c=biws,r=other,p=AAAA", b"c=eSws,r={n},p=AAAA", b"c=biws,r={n}", b"c=biws,r={n},p=!!"):
        client = ScramClient("alice", "s3cret", "SCRAM-SHA-256")
        server = ScramServer("SCRAM-SHA-256", lookup)
        server.respond(client.first_message())
        with pytest.raises(SaslProtocolError):
            server.respond(final.replace(b"{n}", server.nonce.encode()))


def test_plain_checks_the_password_against_the_stored_credential():
    s = PlainServer(lookup)
    assert s.respond(b"\0alice\0s3cret") is None and s.user == "alice"
    for bad in (b"\0alice\0wrong", b"\0mallory\0s3cret"):
        with pytest.raises(AuthenticationError, match=FAILED):
            PlainServer(lookup).respond(bad)
    for malformed in (b"alice\0s3cret", b"\0\0s3cret", b"\0alice\0", b"\0al\xffice\0x"):
        with pytest.raises(SaslProtocolError):
            PlainServer(lookup).respond(malformed)
    with pytest.raises(AuthenticationError, match="authorization id"):
        PlainServer(lookup).respond(b"bob\0alice\0s3cret")


def test_the_credential_is_kafka_s_config_string_and_holds_no_password():
    cred = make_credential("SCRAM-SHA-512", "s3cret", 8192, salt=b"salty")
    text = cred.to_config()
    assert text.startswith("salt=c2FsdHk=,stored_key=") and text.endswith(",iterations=8192")
    assert "s3cret" not in text and ScramCredential.from_config(text) == cred
    with pytest.raises(ValueError, match="not a SCRAM credential"):
        ScramCredential.from_config("salt=!!,iterations=x")
    with pytest.raises(ValueError, match="at least 4096"):
        make_credential("SCRAM-SHA-256", "x", 1000)
