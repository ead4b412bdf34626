"""harness/fuzz_sasl.py and the fuzzer's SASL cases: generated attacks,
played against the broker's real SaslAuthenticator behind a tiny in-process
server (SASL_PLAINTEXT), find nothing; against an authenticator that lets
requests through before authentication, the probe's answer is found."""
from __future__ import annotations

import random
import socket
import struct
import threading
from collections import Counter

import pytest

from cluster.protocol.frame import frame_response, parse_request_header
from cluster.server.authenticator import PASS, FinalResponse, SaslAuthenticator
from cluster.server.kafka_apis import CLOSE
from cluster.server.sasl import make_credential
from harness import fuzz, fuzz_sasl

USER, PASSWORD = "chaoslog-client", "s3cret-for-the-test"
CREDS = {(USER, m): make_credential(m, PASSWORD) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}


class Leaky(SaslAuthenticator):
    """A broken broker: every request passes, authenticated or not."""

    def handle(self, frame):
        out = super().handle(frame)
        return PASS if out is CLOSE else out


class TinyBroker:
    """Frames in, the authenticator first, then an empty answer to anything
    it lets through (what matters is that an answer comes)."""

    def __init__(self, authenticator=SaslAuthenticator):
        self.make = authenticator
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        auth = self.make(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                         lambda u, m: CREDS.get((u, m)))
        with c:
            while True:
                head = c.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                n = struct.unpack(">i", head)[0]
                if n < 0 or n > (auth.max_frame_bytes or 1 << 20):
                    return
                frame = c.recv(n, socket.MSG_WAITALL)
                out = auth.handle(frame)
                if out is PASS:
                    out = frame_response(parse_request_header(frame).correlation_id, b"")
                if out is CLOSE:
                    return
                c.sendall(out)
                if isinstance(out, FinalResponse):
                    return

    def close(self):
        self.sock.close()


def _target(port: int) -> fuzz.Target:
    return fuzz.Target([fuzz.Broker(1, "127.0.0.1", port, 1)], 1, 1, {"t": 1},
                       credentials=(USER, PASSWORD))


def _play(broker: TinyBroker, cases: int) -> Counter:
    target = _target(broker.port)
    outcomes = Counter()
    for i in range(cases):
        case = fuzz._sasl_case(fuzz.case_rng(7, i), i, target.brokers[0], target)
        outcomes[fuzz.send_case(case)[0]] += 1
    return outcomes


def test_every_attack_is_closed_by_the_authenticator():
    broker = TinyBroker()
    try:
        outcomes = _play(broker, 150)
    finally:
        broker.close()
    assert outcomes["accepted"] == 0, outcomes
    assert outcomes["closed"] >= 140, outcomes


def test_a_broker_that_lets_requests_through_is_found():
    broker = TinyBroker(Leaky)
    try:
        outcomes = _play(broker, 60)
    finally:
        broker.close()
    assert outcomes["accepted"] >= 5, outcomes   # the early requests (8 of these 60 cases)


def test_the_attacks_cover_every_kind_and_never_name_the_password():
    kinds = Counter()
    for i in range(400):
        what, frames = fuzz_sasl.attack(random.Random(i), 100, USER, PASSWORD)
        kinds[what.split(":")[0]] += 1
        assert PASSWORD not in what and frames
    assert set(kinds) == set(fuzz_sasl.ATTACKS)


@pytest.mark.parametrize("index", range(5))
def test_a_sasl_target_makes_only_sasl_and_churn_cases(index):
    from harness.security import ClientSecurity
    target = _target(1)
    target.security = ClientSecurity(security_protocol="SASL_PLAINTEXT", username=USER,
                                     password_env="UNUSED")
    assert fuzz.make_case(3, index, target).kind in fuzz.SASL_KINDS
