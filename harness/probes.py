"""Control-plane probes: the requests a deposed controller, or one that
reaches the wrong broker, would send; a broker must refuse every one.

docs/design.md#controller-epoch: a broker applies a controller request only
if it carries the newest controller epoch the broker has seen, names this
broker and its current start epoch (#g-controller-epoch). Whether a zombie
controller's request ever arrives during a chaos run is a matter of timing
(a controller frozen in the middle of an event); these probes send such
requests on purpose, one of each kind, each one that a correct broker turns
down with STALE_CONTROLLER_EPOCH or STALE_BROKER_EPOCH. A probe that is
accepted would move a leadership or delete a replica, so each is aimed at a
topic of its own, and after the probes the broker must still be a follower
with its replica intact and serve the leader ZooKeeper names.

They speak chaoslog's own controller protocol (cluster/protocol/control.py):
they need the built-in cluster, not just any Kafka-protocol system.
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

from cluster import zkpaths
from cluster.protocol import control
from cluster.protocol import errors as E
from harness import kafka_wire

_SIZE = struct.Struct(">i")


@dataclass
class ProbeResult:
    probe: str          # what the request pretends to be
    expected: int       # the error a correct broker answers
    got: int | None     # what it answered (None: no answer)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.got == self.expected

    def __str__(self) -> str:
        got = "no answer" if self.got is None else E.name(self.got)
        return (f"{self.probe}: answered {got}, expected {E.name(self.expected)}"
                + (f" ({self.detail})" if self.detail else ""))


def call(host: str, port: int, body: Any, timeout: float = 10.0) -> Any:
    """Send one controller request, return the decoded response body."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(control.encode_request(body, correlation_id=1, client_id="chaoslog-probe"))
        (n,) = _SIZE.unpack(_read(sock, 4))
        return control.decode_response(body.API_KEY, _read(sock, n))


def _read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return buf


@dataclass
class _Partition:
    """What ZooKeeper says of the probed partition and its follower."""
    topic: str
    partition: int
    lai: zkpaths.LeaderAndIsr
    replicas: tuple[int, ...]
    controller: int
    controller_epoch: int
    follower: zkpaths.BrokerRegistration
    other: int           # a broker that is not the follower


def _read_state(zk: Any, topic: str, partition: int) -> _Partition:
    lai = zkpaths.read_leader_and_isr(zk, topic, partition)
    replicas = zkpaths.TopicAssignment.decode(zk.get(zkpaths.topic_path(topic))[0]).partitions[partition]
    controller = int((zkpaths.loads(zk.get(zkpaths.CONTROLLER)[0]) or {})["brokerid"])
    epoch = int(zk.get(zkpaths.CONTROLLER_EPOCH)[0])
    followers = [b for b in lai.isr if b != lai.leader]
    if not followers:
        raise RuntimeError(f"{topic}/{partition} has no in-sync follower to probe: ISR {lai.isr}")
    f = followers[0]
    reg = zkpaths.BrokerRegistration.decode(f, zk.get(f"{zkpaths.BROKER_IDS}/{f}")[0])
    other = next(b for b in replicas if b != f)
    return _Partition(topic, partition, lai, tuple(replicas), controller, epoch, reg, other)


def probe_stale_requests(zk: Any, topic: str, partition: int = 0) -> list[ProbeResult]:
    """Send the follower of `topic`/`partition` five requests it must refuse:
    LeaderAndIsr (make it leader), StopReplica (delete its replica) and
    UpdateMetadata (name it leader) of the previous controller epoch, and
    LeaderAndIsr of the current epoch meant for another broker or for an
    earlier incarnation of itself. Returns one result per probe."""
    s = _read_state(zk, topic, partition)
    f = s.follower
    usurp = control.PartitionState(topic, partition, f.broker_id, s.lai.leader_epoch + 1,
                                   tuple(s.lai.isr), s.lai.zk_version + 1, s.replicas)
    me = (control.BrokerEndpoint(f.broker_id, f.host, f.port),)
    stale = s.controller_epoch - 1
    tp = (control.TopicPartition(topic, partition),)
    probes = [
        ("LeaderAndIsr of the previous controller epoch", E.STALE_CONTROLLER_EPOCH,
         control.LeaderAndIsrRequest(s.controller, stale, False, (usurp,), me,
                                     f.broker_id, f.start_epoch)),
        ("StopReplica (delete) of the previous controller epoch", E.STALE_CONTROLLER_EPOCH,
         control.StopReplicaRequest(s.controller, stale, True, tp, f.broker_id, f.start_epoch)),
        ("UpdateMetadata of the previous controller epoch", E.STALE_CONTROLLER_EPOCH,
         control.UpdateMetadataRequest(s.controller, stale, (usurp,), me, f.broker_id,
                                       f.start_epoch)),
        (f"LeaderAndIsr meant for broker {s.other}", E.STALE_BROKER_EPOCH,
         control.LeaderAndIsrRequest(s.controller, s.controller_epoch, False, (usurp,), me,
                                     s.other, -1)),
        ("LeaderAndIsr for an earlier incarnation", E.STALE_BROKER_EPOCH,
         control.LeaderAndIsrRequest(s.controller, s.controller_epoch, False, (usurp,), me,
                                     f.broker_id, f.start_epoch - 1)),
    ]
    out = []
    for name, expected, body in probes:
        try:
            resp = call(f.host, f.port, body)
            out.append(ProbeResult(name, expected, resp.error))
        except (OSError, control.ProtocolError) as e:
            out.append(ProbeResult(name, expected, None, str(e)))
    return out


def follower_unchanged(zk: Any, topic: str, partition: int, follower: int, host: str,
                       port: int) -> list[str]:
    """After the probes: the follower is not the leader (a consumer's
    ListOffsets is refused with NOT_LEADER_FOR_PARTITION), and the leader
    it serves in Metadata is the one ZooKeeper names. Returns what is wrong."""
    leader = zkpaths.read_leader_and_isr(zk, topic, partition).leader
    wrong = []
    conn = kafka_wire.KafkaConnection(host, port, client_id="chaoslog-probe")
    try:
        err, _ = kafka_wire.list_offset(conn, topic, partition, -1)
        if err != E.NOT_LEADER_FOR_PARTITION:
            wrong.append(f"broker {follower} answers ListOffsets of {topic}/{partition} with "
                         f"{E.name(err)}, not as a follower (ZooKeeper: leader {leader})")
        served = kafka_wire.metadata(conn, [topic]).partitions.get((topic, partition))
        if served is None or served.leader != leader:
            wrong.append(f"broker {follower} serves leader "
                         f"{None if served is None else served.leader} for {topic}/{partition}, "
                         f"ZooKeeper says {leader}")
    finally:
        conn.close()
    return wrong
