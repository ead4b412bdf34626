"""KafkaApis: one handler per request type.

`handle(frame)` runs synchronously on the event loop and returns what the
connection must do next: response bytes, None (no response: acks=0 produce),
CLOSE, or an awaitable resolving to one of those (an acks=all produce waiting
for the HW, a fetch waiting for data). Doing the synchronous part at once, in
arrival order, is what keeps the appends of pipelined produce requests in
order on a connection while several of them wait for replication at the
same time; the socket server writes the responses in request order.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kafka.protocol.consumer import (FetchResponse, ListOffsetsResponse,
                                     OffsetForLeaderEpochResponse)
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse
from kafka.protocol.producer import InitProducerIdResponse, ProduceResponse
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse
from kafka.record.default_records import DefaultRecordBatch

from cluster.coordination import Component, Coordination
from cluster.protocol import api, control
from cluster.protocol import errors as E
from cluster.protocol.frame import (ProtocolError, RequestHeader, frame_response,
                                    parse_request_header, skip_tagged_fields)
from cluster.protocol.records import RecordError, batch_headers, down_convert, to_v2
from cluster.server.admin_apis import AdminApis
from cluster.server.group_apis import GroupApis
from cluster.server.metadata_cache import MetadataCache
from cluster.server.internal_topic import INTERNAL_TOPICS, NO_NODE
from cluster.server.replica_manager import ReplicaManager
from cluster.server.state_window import STATE_WINDOW_KEY, STATE_WINDOW_VERSION, StateWindow
from cluster.server.transaction_apis import TransactionApis
from cluster.server.txn_markers import write_markers

log = logging.getLogger(__name__)

CLOSE = object()  # sentinel: close the connection
READ_COMMITTED = 1  # a Fetch's or ListOffsets' isolation level
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1   # FindCoordinator's key types


def _end_of(records) -> int:
    """The offset after the last whole batch in `records` (a fetch's read)."""
    headers = batch_headers(records)
    return headers[-1].next_offset if headers else 0


def _current_leader_epoch(partition_request) -> int:
    """The leader epoch a Fetch (v9+) or OffsetForLeaderEpoch (v2+) partition
    entry names, -1 in older versions (docs/design.md#fencing)."""
    epoch = getattr(partition_request, "current_leader_epoch", None)
    return -1 if epoch is None else epoch


class KafkaApis:
    """Handed what the handlers need: the replica manager (partitions,
    controller requests), the metadata cache, the ZooKeeper client (producer
    ids), the coordination mode (admin requests) and this broker's component
    of it (who serves admin requests, ControlledShutdown); without one, a
    broker that is never the controller."""

    def __init__(self, cfg, rm: ReplicaManager, metadata: MetadataCache, zk: Any = None,
                 coordination: Coordination | None = None, component: Component | None = None,
                 window: StateWindow | None = None):
        self.cfg = cfg
        self.rm = rm
        self.metadata = metadata
        self.zk = zk
        self.component = component
        self.window = window     # the test-only state window, when the harness asked for it
        self.broker_id = cfg.broker_id
        self.max_message_bytes = cfg["message.max.bytes"]
        self._refused_metadata = 0  # client Metadata requests refused while uninformed
        self.admin = AdminApis(cfg, metadata, zk, coordination,
                               serves_admin=lambda: component is not None and component.serves_admin())
        self.groups = GroupApis(cfg, rm, metadata, zk)
        rm.add_leadership_listener(self.groups.coordinator.on_leadership_change)
        self.txns = TransactionApis(cfg, rm, metadata, zk, self.groups.coordinator.on_txn_marker)

    # -- dispatch -------------------------------------------------------------------------

    def handle(self, frame) -> Any:
        try:
            hdr = parse_request_header(frame)
        except ProtocolError as e:
            log.warning("malformed request header: %s; closing connection", e)
            return CLOSE
        key, version = hdr.api_key, hdr.api_version
        if key == api.API_VERSIONS:
            if not api.is_supported(key, version):
                return frame_response(hdr.correlation_id,
                                      api.api_versions_body(0, E.UNSUPPORTED_VERSION))
            return frame_response(hdr.correlation_id, api.api_versions_body(version))
        if key == STATE_WINDOW_KEY and version == STATE_WINDOW_VERSION and self.window:
            return self.window.handle(hdr.correlation_id, bytes(frame[hdr.body_offset:]))
        if not api.is_supported(key, version):
            log.warning("unsupported request api_key=%d version=%d from %r; closing connection",
                        key, version, hdr.client_id)
            return CLOSE
        try:
            if key in control.CONTROL_API_KEYS:
                return self._handle_control(hdr, frame)
            body = (skip_tagged_fields(frame, hdr.body_offset) if api.is_flexible(key, version)
                    else hdr.body_offset)
            req = api.decode_request(key, version, frame, body)
        except ProtocolError as e:
            log.warning("malformed %s v%d request from %r: %s; closing connection",
                        api.NAMES.get(key), version, hdr.client_id, e)
            return CLOSE
        handler = self._handlers[key]
        try:
            return handler(self, hdr, req)
        except Exception:
            log.exception("error handling %s v%d", api.NAMES.get(key), version)
            return CLOSE

    def _respond(self, hdr: RequestHeader, response) -> bytes:
        return frame_response(hdr.correlation_id,
                              api.encode_response(hdr.api_key, hdr.api_version, response),
                              api.is_flexible(hdr.api_key, hdr.api_version))

    # -- controller requests ---------------------------------------------------------------

    def _handle_control(self, hdr: RequestHeader, frame):
        _, req = control.decode_request(bytes(frame))
        if isinstance(req, control.LeaderAndIsrRequest):
            resp = self.rm.handle_leader_and_isr(req)
        elif isinstance(req, control.StopReplicaRequest):
            resp = self.rm.handle_stop_replica(req)
        elif isinstance(req, control.UpdateMetadataRequest):
            resp = self.rm.handle_update_metadata(req)
        elif isinstance(req, control.WriteTxnMarkersRequest):
            return self._write_txn_markers(hdr, req)
        else:
            return self._controlled_shutdown(hdr, req)
        return control.encode_response(resp, hdr.correlation_id)

    def _write_txn_markers(self, hdr, req: control.WriteTxnMarkersRequest):
        """A transaction coordinator's markers for partitions led here."""
        async def run():
            resp = await write_markers(self.rm.partition, req.markers, self.rm.min_isr,
                                       self.cfg["request.timeout.ms"] / 1000,
                                       self.groups.coordinator.on_txn_marker)
            return control.encode_response(resp, hdr.correlation_id)
        return run()

    def _controlled_shutdown(self, hdr, req: control.ControlledShutdownRequest):
        """Route to the controller component running in this process; it
        answers with a concurrent Future of (error, [(topic, partition)])."""
        fut = (None if self.component is None
               else self.component.controlled_shutdown(req.broker_id, req.broker_epoch))
        if fut is None:
            return control.encode_response(
                control.ControlledShutdownResponse(E.NOT_CONTROLLER, ()), hdr.correlation_id)

        async def run():
            try:
                err, remaining = await asyncio.wrap_future(fut)
                resp = control.ControlledShutdownResponse(
                    err, tuple(control.TopicPartition(t, p) for t, p in remaining))
            except Exception:
                log.exception("controlled shutdown of broker %d failed", req.broker_id)
                resp = control.ControlledShutdownResponse(E.UNKNOWN_SERVER_ERROR, ())
            return control.encode_response(resp, hdr.correlation_id)
        return run()

    # -- ApiVersions is answered in handle(); Metadata ---------------------------------------

    def _metadata(self, hdr: RequestHeader, req):
        if not self.metadata.updated:
            # No UpdateMetadata from the controller yet (just started, or
            # restarted and waiting for its predecessor's session to expire):
            # this broker does not know the cluster, so it must not describe
            # it. A list of just itself made librdkafka (>= 2.10) drop the
            # other brokers and re-send produce requests in flight on them,
            # already appended (duplicates despite retries=0). Closing sends
            # the client to a broker that knows.
            if not self._refused_metadata:
                log.info("refusing client Metadata before the first UpdateMetadata "
                         "(closing the connection from %r)", hdr.client_id)
            self._refused_metadata += 1
            return CLOSE
        v = hdr.api_version
        live = self.metadata.live_brokers()
        brokers = [(bid, host, port, None) if v >= 1 else (bid, host, port)
                   for bid, (host, port) in sorted(live.items())]
        if req.topics is None or (v == 0 and not req.topics):
            names = sorted(self.metadata.topics)
        else:
            names = [t.name for t in req.topics]
        topics = []
        for name in names:
            parts = self.metadata.topics.get(name)
            if parts is None:
                topics.append((E.UNKNOWN_TOPIC_OR_PARTITION, name, False, []) if v >= 1
                              else (E.UNKNOWN_TOPIC_OR_PARTITION, name, []))
                continue
            plist = []
            for idx, cp in sorted(parts.items()):
                err = E.LEADER_NOT_AVAILABLE if cp.leader < 0 else E.NONE
                part = (err, idx, cp.leader, list(cp.replicas), list(cp.isr))
                if v >= 5:
                    part += ([r for r in cp.replicas if r not in live],)
                plist.append(part)
            topics.append((E.NONE, name, name in INTERNAL_TOPICS, plist) if v >= 1
                          else (E.NONE, name, plist))
        kw: dict[str, Any] = {"brokers": brokers, "topics": topics}
        if v >= 1:
            kw["controller_id"] = self.metadata.controller_id
        if v >= 2:
            kw["cluster_id"] = "chaoslog"
        if v >= 3:
            kw["throttle_time_ms"] = 0
        return self._respond(hdr, MetadataResponse(version=v, **kw))

    # -- Produce ----------------------------------------------------------------------------------

    def _produce(self, hdr: RequestHeader, req):
        v = hdr.api_version
        acks = req.acks
        results: list[tuple[str, list[list[int]]]] = []
        waits: list[tuple[list[int], asyncio.Future]] = []
        for td in req.topic_data:
            plist = []
            for pd in td.partition_data:
                r = [pd.index, E.NONE, -1, -1]  # index, error, base offset, log start offset
                plist.append(r)
                if acks not in (0, 1, -1):
                    r[1] = E.INVALID_REQUIRED_ACKS
                    continue
                if td.name in INTERNAL_TOPICS:
                    r[1] = E.INVALID_TOPIC_EXCEPTION   # only the coordinator writes there
                    continue
                p = self.rm.partition((td.name, pd.index))
                if p is None or not p.is_leader:
                    r[1] = (E.NOT_LEADER_FOR_PARTITION
                            if self.metadata.partition(td.name, pd.index) is not None
                            else E.UNKNOWN_TOPIC_OR_PARTITION)
                    continue
                try:
                    data, headers = to_v2(pd.records)
                except RecordError as e:
                    log.warning("produce to %s-%d rejected: %s", td.name, pd.index, e)
                    r[1] = e.code
                    continue
                err, base, required = p.append_as_leader(data, headers, acks, self.rm.min_isr,
                                                         self.max_message_bytes)
                r[1], r[2] = err, base
                if err == E.NONE:
                    r[3] = p.log.log_start_offset
                if err == E.NONE and acks == -1:
                    if p.hw >= required:
                        r[1] = p.ack_result()
                    else:
                        waits.append((r, p.hw_waiters.add(required)))
            results.append((td.name, plist))
        if acks == 0:
            # No response; on an error Kafka closes the connection so the
            # producer notices and refreshes its metadata.
            if any(r[1] != E.NONE for _, plist in results for r in plist):
                return CLOSE
            return None
        if not waits:
            return self._produce_response(hdr, results)
        return self._await_produce(hdr, results, waits, req.timeout_ms)

    async def _await_produce(self, hdr, results, waits, timeout_ms: int):
        futs = [f for _, f in waits]
        await asyncio.wait(futs, timeout=max(0, timeout_ms) / 1000)
        for r, f in waits:
            if f.done():
                r[1] = f.result()
            else:
                f.cancel()
                r[1] = E.REQUEST_TIMED_OUT
        return self._produce_response(hdr, results)

    def _produce_response(self, hdr, results) -> bytes:
        v = hdr.api_version
        topics = []
        for name, plist in results:
            if v >= 5:
                parts = [(i, err, off, -1, log_start) for i, err, off, log_start in plist]
            elif v >= 2:
                parts = [(i, err, off, -1) for i, err, off, _ in plist]
            else:
                parts = [(i, err, off) for i, err, off, _ in plist]
            topics.append((name, parts))
        kw: dict[str, Any] = {"responses": topics}
        if v >= 1:
            kw["throttle_time_ms"] = 0
        return self._respond(hdr, ProduceResponse(version=v, **kw))

    # -- Fetch -------------------------------------------------------------------------------------

    def _fetch(self, hdr: RequestHeader, req):
        if hdr.api_version >= 7:
            # No fetch sessions (KIP-227 lets a broker decline them): a full
            # fetch is answered with session id 0, and the client goes on
            # sending full fetches; an incremental one names a session this
            # broker never gave.
            if req.session_id != 0:
                return self._fetch_refused(hdr, E.FETCH_SESSION_ID_NOT_FOUND)
            if req.session_epoch not in (0, -1):
                return self._fetch_refused(hdr, E.INVALID_FETCH_SESSION_EPOCH)
        replica_id = req.replica_id
        if replica_id >= 0:
            # A follower's fetch offset is its LEO: record it once per request,
            # unless the follower is fenced (docs/design.md#fencing).
            for ft in req.topics:
                for fp in ft.partitions:
                    p = self.rm.partition((ft.topic, fp.partition))
                    if (p is not None and p.is_leader and fp.fetch_offset <= p.leo
                            and p.leader_epoch_error(_current_leader_epoch(fp)) == E.NONE):
                        self.rm.on_follower_fetch(p, replica_id, fp.fetch_offset)
        result, nbytes, errors = self._read_fetch(hdr, req)
        if nbytes >= req.min_bytes or req.max_wait_ms <= 0 or errors:
            return self._fetch_response(hdr, result)
        # Park now, before returning: the coroutine's first step runs in a
        # later loop iteration, and an append made in between (a produce on
        # another connection) must still wake this fetch. Registering the
        # waiters there instead lost that wakeup, and the follower then sat
        # until the next append or replica.fetch.wait.max.ms.
        parts = [p for ft in req.topics for fp in ft.partitions
                 if (p := self.rm.partition((ft.topic, fp.partition))) is not None]
        follower = replica_id >= 0
        return self._delayed_fetch(hdr, req, parts, follower, self._park(parts, follower))

    @staticmethod
    def _park(parts, follower: bool) -> list[asyncio.Future]:
        """Futures completed by the next change that can satisfy the fetch: an
        append for a follower (it reads up to the LEO), an HW advance for a
        consumer (it reads below the HW); a leadership change or a stopped
        replica wakes both."""
        return [(p.data_notifier if follower else p.hw_notifier).wait() for p in parts]

    async def _delayed_fetch(self, hdr, req, parts, follower: bool, futs):
        deadline = time.monotonic() + req.max_wait_ms / 1000
        try:
            while futs:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                done, _ = await asyncio.wait(futs, timeout=remaining,
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    break  # max_wait_ms is up
                for f in futs:
                    f.cancel()
                result, nbytes, errors = self._read_fetch(hdr, req)
                if nbytes >= req.min_bytes or errors:
                    return self._fetch_response(hdr, result)
                futs = self._park(parts, follower)  # no await since the read
        finally:
            for f in futs:
                f.cancel()
        if not parts:
            await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        result, _, _ = self._read_fetch(hdr, req)
        return self._fetch_response(hdr, result)

    def _read_fetch(self, hdr, req):
        v = hdr.api_version
        replica_id = req.replica_id
        # docs/design.md#transactions: read_committed reads below the LSO.
        read_committed = v >= 4 and req.isolation_level == READ_COMMITTED and replica_id < 0
        budget = req.max_bytes if v >= 3 else None
        total = 0
        errors = False
        out = []
        for ft in req.topics:
            plist = []
            for fp in ft.partitions:
                p = self.rm.partition((ft.topic, fp.partition))
                hw = lso = log_start = -1
                records = b""
                aborted = None
                if p is None:
                    err = (E.NOT_LEADER_FOR_PARTITION
                           if self.metadata.partition(ft.topic, fp.partition) is not None
                           else E.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    max_bytes = fp.partition_max_bytes
                    if budget is not None:
                        max_bytes = min(max_bytes, budget - total)
                    if max_bytes <= 0 and total > 0:
                        err = E.NONE
                    else:
                        err, records = p.read(fp.fetch_offset, max(max_bytes, 1), replica_id,
                                              _current_leader_epoch(fp), read_committed)
                    if err in (E.NONE, E.OFFSET_OUT_OF_RANGE):
                        hw, log_start = p.hw, p.log.log_start_offset
                        lso = p.last_stable_offset
                    if read_committed and records:
                        aborted = [(a.producer_id, a.first_offset) for a in
                                   p.txns.aborted_between(fp.fetch_offset, _end_of(records))]
                if err != E.NONE:
                    errors = True
                total += len(records)
                plist.append([fp.partition, err, hw, lso, log_start, aborted, records])
            out.append((ft.topic, plist))
        return out, total, errors

    def _fetch_response(self, hdr, result) -> bytes:
        v = hdr.api_version
        magic = 2 if v >= 4 else (1 if v >= 2 else 0)
        topics = []
        for name, plist in result:
            parts = []
            for idx, err, hw, lso, log_start, aborted, records in plist:
                if magic < 2 and records:
                    records = down_convert(records, magic)
                if v >= 5:
                    parts.append((idx, err, hw, lso, log_start, aborted, records))
                elif v >= 4:
                    parts.append((idx, err, hw, lso, aborted, records))
                else:
                    parts.append((idx, err, hw, records))
            topics.append((name, parts))
        kw: dict[str, Any] = {"responses": topics}
        if v >= 1:
            kw["throttle_time_ms"] = 0
        if v >= 7:
            kw.update(error_code=E.NONE, session_id=0)
        return self._respond(hdr, FetchResponse(version=v, **kw))

    def _fetch_refused(self, hdr, error: int) -> bytes:
        return self._respond(hdr, FetchResponse(version=hdr.api_version, throttle_time_ms=0,
                                                error_code=error, session_id=0, responses=[]))

    # -- ListOffsets -------------------------------------------------------------------------------

    def _list_offsets(self, hdr: RequestHeader, req):
        v = hdr.api_version
        topics = []
        for t in req.topics:
            plist = []
            for lp in t.partitions:
                err, ts, off = self._offset_for(
                    t.name, lp.partition_index, lp.timestamp, req.replica_id,
                    v >= 2 and req.isolation_level == READ_COMMITTED)
                if v == 0:
                    plist.append((lp.partition_index, err, [off] if err == E.NONE and off >= 0
                                  else []))
                else:
                    plist.append((lp.partition_index, err, ts, off))
            topics.append((t.name, plist))
        kw: dict[str, Any] = {"throttle_time_ms": 0} if v >= 2 else {}
        return self._respond(hdr, ListOffsetsResponse(version=v, topics=topics, **kw))

    def _offset_for(self, topic: str, partition: int, timestamp: int, replica_id: int,
                    read_committed: bool):
        p = self.rm.partition((topic, partition))
        if p is None or not p.is_leader:
            err = (E.NOT_LEADER_FOR_PARTITION if self.metadata.partition(topic, partition)
                   is not None or p is not None else E.UNKNOWN_TOPIC_OR_PARTITION)
            return err, -1, -1
        if timestamp == -2:
            return E.NONE, -1, p.log.log_start_offset
        if timestamp == -1:
            # Consumers: the HW (the LSO at read_committed): where their reads
            # stop; replicas: the LEO.
            if replica_id >= 0:
                return E.NONE, -1, p.leo
            return E.NONE, -1, p.last_stable_offset if read_committed else p.hw
        # By timestamp: first batch (below the HW) whose max timestamp reaches it,
        # then the first record in it that does.
        for h in p.log.batches(p.log.log_start_offset):
            if h.base_offset >= p.hw:
                break
            if h.max_timestamp >= timestamp:
                data = p.log.read(h.base_offset, 1, p.hw)
                for rec in DefaultRecordBatch(data[:h.size]):
                    if rec.timestamp >= timestamp:
                        return E.NONE, rec.timestamp, rec.offset
        return E.NONE, -1, -1

    # -- InitProducerId ------------------------------------------------------------------------------

    def _init_producer_id(self, hdr: RequestHeader, req):
        if req.transactional_id is not None:
            return self._transaction(hdr, req)
        zk = self.zk

        async def run():
            err, pid = E.NONE, -1
            try:
                pid = await zk.call(zk.next_producer_id, self.broker_id)
            except Exception as e:
                log.warning("producer id allocation failed: %r", e)
                err = E.BROKER_NOT_AVAILABLE
            log.info("InitProducerId from %r: producer id %d", hdr.client_id, pid)
            return self._respond(hdr, InitProducerIdResponse(
                version=hdr.api_version, throttle_time_ms=0, error_code=err, producer_id=pid,
                producer_epoch=0 if pid >= 0 else -1))
        return run()

    # -- OffsetForLeaderEpoch (KIP-101 / KIP-279) -----------------------------------------------------

    def _offset_for_leader_epoch(self, hdr: RequestHeader, req):
        v = hdr.api_version
        topics = []
        for t in req.topics:
            plist = []
            for lp in t.partitions:
                p = self.rm.partition((t.topic, lp.partition))
                epoch, end = -1, -1
                if p is None:
                    err = (E.NOT_LEADER_FOR_PARTITION
                           if self.metadata.partition(t.topic, lp.partition) is not None
                           else E.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    # Fencing first, as Kafka does (docs/design.md#fencing).
                    err = p.leader_epoch_error(_current_leader_epoch(lp))
                    if err == E.NONE and not p.is_leader:
                        err = E.NOT_LEADER_FOR_PARTITION
                    if err == E.NONE:
                        epoch, end = p.log.leader_epoch_cache.end_offset_for(lp.leader_epoch,
                                                                             p.leo)
                plist.append((err, lp.partition, epoch, end) if v >= 1
                             else (err, lp.partition, end))
            topics.append((t.topic, plist))
        kw = {"throttle_time_ms": 0} if v >= 2 else {}
        return self._respond(hdr, OffsetForLeaderEpochResponse(version=v, topics=topics, **kw))

    # -- admin requests (docs/design.md#admin-api) ------------------------------------------

    def _admin(self, hdr: RequestHeader, req):
        serve = {api.CREATE_TOPICS: self.admin.create_topics,
                 api.DELETE_TOPICS: self.admin.delete_topics,
                 api.CREATE_PARTITIONS: self.admin.create_partitions,
                 api.DESCRIBE_CONFIGS: self.admin.describe_configs}[hdr.api_key]

        async def run():
            return self._respond(hdr, await serve(req, hdr.api_version))
        return run()

    # -- FindCoordinator: groups and transactional ids ----------------------------------------

    def _find_coordinator(self, hdr: RequestHeader, req):
        v = hdr.api_version
        key_type = req.key_type if v >= 1 else KEY_TYPE_GROUP
        topic = {KEY_TYPE_GROUP: self.groups.topic,
                 KEY_TYPE_TRANSACTION: self.txns.topic}.get(key_type)

        async def run():
            err, node = E.INVALID_REQUEST, NO_NODE
            if topic is not None and req.key is not None:
                err, node = await topic.coordinator_of(req.key)
            kw: dict[str, Any] = dict(error_code=err, node_id=node[0], host=node[1],
                                      port=node[2])
            if v >= 1:
                kw.update(throttle_time_ms=0, error_message=None)
            return self._respond(hdr, FindCoordinatorResponse(version=v, **kw))
        return run()

    # -- transactional requests (docs/design.md#transactions) ---------------------------------

    def _transaction(self, hdr: RequestHeader, req):
        serve = {api.INIT_PRODUCER_ID: self.txns.init_producer_id,
                 api.ADD_PARTITIONS_TO_TXN: self.txns.add_partitions_to_txn,
                 api.ADD_OFFSETS_TO_TXN: self.txns.add_offsets_to_txn,
                 api.END_TXN: self.txns.end_txn,
                 api.TXN_OFFSET_COMMIT: self.groups.txn_offset_commit,
                 api.DESCRIBE_TRANSACTIONS: self.txns.describe_transactions,
                 api.LIST_TRANSACTIONS: self.txns.list_transactions}[hdr.api_key]

        async def run():
            return self._respond(hdr, await serve(hdr, req))
        return run()

    # -- SASL on a listener without it (docs/design.md#security) ------------------------------

    def _sasl_refused(self, hdr: RequestHeader, req):
        if hdr.api_key == api.SASL_HANDSHAKE:
            return self._respond(hdr, SaslHandshakeResponse(error_code=E.ILLEGAL_SASL_STATE,
                                                            mechanisms=[]))
        return self._respond(hdr, SaslAuthenticateResponse(
            error_code=E.ILLEGAL_SASL_STATE, error_message="this listener does not use SASL",
            auth_bytes=b"", session_lifetime_ms=0))

    # -- group requests (docs/design.md#groups) ---------------------------------------------

    def _group(self, hdr: RequestHeader, req):
        serve = {api.JOIN_GROUP: self.groups.join_group,
                 api.SYNC_GROUP: self.groups.sync_group,
                 api.HEARTBEAT: self.groups.heartbeat,
                 api.LEAVE_GROUP: self.groups.leave_group,
                 api.OFFSET_COMMIT: self.groups.offset_commit,
                 api.OFFSET_FETCH: self.groups.offset_fetch,
                 api.LIST_GROUPS: self.groups.list_groups,
                 api.DESCRIBE_GROUPS: self.groups.describe_groups}[hdr.api_key]

        async def run():
            return self._respond(hdr, await serve(hdr, req))
        return run()

    _handlers = {
        api.METADATA: _metadata,
        api.PRODUCE: _produce,
        api.FETCH: _fetch,
        api.LIST_OFFSETS: _list_offsets,
        api.INIT_PRODUCER_ID: _init_producer_id,
        api.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
        api.CREATE_TOPICS: _admin,
        api.DELETE_TOPICS: _admin,
        api.CREATE_PARTITIONS: _admin,
        api.DESCRIBE_CONFIGS: _admin,
        api.FIND_COORDINATOR: _find_coordinator,
        **dict.fromkeys((api.JOIN_GROUP, api.SYNC_GROUP, api.HEARTBEAT, api.LEAVE_GROUP,
                         api.OFFSET_COMMIT, api.OFFSET_FETCH, api.LIST_GROUPS,
                         api.DESCRIBE_GROUPS), _group),
        **dict.fromkeys((api.ADD_PARTITIONS_TO_TXN, api.ADD_OFFSETS_TO_TXN, api.END_TXN,
                         api.TXN_OFFSET_COMMIT, api.DESCRIBE_TRANSACTIONS,
                         api.LIST_TRANSACTIONS), _transaction),
        **dict.fromkeys(api.SASL_APIS, _sasl_refused),
    }
