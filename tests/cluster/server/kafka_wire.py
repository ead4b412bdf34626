"""Raw Kafka requests for the broker tests, built with kafka-python's classes."""
from __future__ import annotations

import socket
import struct

from kafka.record.default_records import DefaultRecordBatchBuilder

from broker_cluster import read_frame


class Wire:
    """One connection to a broker; send requests, read responses."""

    def __init__(self, addr, timeout: float = 10):
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.corr = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request_frame(self, api_key: int, version: int, body: bytes, client_id=b"test") -> bytes:
        self.corr += 1
        header = struct.pack(">hhih", api_key, version, self.corr, len(client_id)) + client_id
        return struct.pack(">i", len(header) + len(body)) + header + body

    def call(self, req_cls, resp_cls, version: int, **fields):
        req = req_cls(version=version, **fields)
        self.send_raw(self.request_frame(req_cls.API_KEY, version, bytes(req.encode(version=version))))
        frame = read_frame(self.sock)
        if frame is None:
            return None
        (corr,) = struct.unpack_from(">i", frame)
        assert corr == self.corr
        return resp_cls.decode(frame[4:], version=version)

    def closed_by_peer(self) -> bool:
        try:
            self.sock.settimeout(5)
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def v2_batch(values, producer_id=-1, producer_epoch=-1, base_sequence=-1) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=producer_id, producer_epoch=producer_epoch,
                                  base_sequence=base_sequence, batch_size=1 << 30)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=v, headers=[])
    return bytes(b.build())


def produce(wire: Wire, topic: str, partition: int, records: bytes, acks: int = -1,
            version: int = 3, timeout_ms: int = 10000):
    from kafka.protocol.producer import ProduceRequest, ProduceResponse
    fields = dict(acks=acks, timeout_ms=timeout_ms, topic_data=[(topic, [(partition, records)])])
    if version >= 3:
        fields["transactional_id"] = None
    resp = wire.call(ProduceRequest, ProduceResponse, version, **fields)
    if resp is None:
        return None
    pr = resp.responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def fetch(wire: Wire, topic: str, partition: int, offset: int, version: int = 4,
          replica_id: int = -1, max_wait_ms: int = 0, min_bytes: int = 0):
    from kafka.protocol.consumer import FetchRequest, FetchResponse
    fields = dict(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                  topics=[(topic, [(partition, offset, 1 << 20)])])
    if version >= 3:
        fields["max_bytes"] = 1 << 24
    if version >= 4:
        fields["isolation_level"] = 0
    resp = wire.call(FetchRequest, FetchResponse, version, **fields)
    pd = resp.responses[0].partitions[0]
    return pd.error_code, pd.high_watermark, pd.records


def list_offset(wire: Wire, topic: str, partition: int, timestamp: int = -1):
    from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
    resp = wire.call(ListOffsetsRequest, ListOffsetsResponse, 1, replica_id=-1,
                     topics=[(topic, [(partition, timestamp)])])
    p = resp.topics[0].partitions[0]
    return p.error_code, p.offset


def metadata(wire: Wire, topics=None, version: int = 1):
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse
    t = None if topics is None else [(name,) for name in topics]
    return wire.call(MetadataRequest, MetadataResponse, version, topics=t)


def init_producer_id(wire: Wire) -> int:
    from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse
    resp = wire.call(InitProducerIdRequest, InitProducerIdResponse, 0, transactional_id=None,
                     transaction_timeout_ms=60000)
    assert resp.error_code == 0
    return resp.producer_id
