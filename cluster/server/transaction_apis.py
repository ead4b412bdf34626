"""TransactionApis: the transactional requests (InitProducerId with a
transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) served by the
TransactionCoordinator of the ids whose `__transaction_state` partitions
this broker leads, and what the coordinator is handed: the log appends,
the markers, producer ids (docs/design.md#transactions).

Requests in, coordinator calls, responses out at the version asked. What
runs in the background: loading a transaction-log partition when this
broker becomes its leader, writing the markers of prepared transactions
(after EndTxn, after a load, after a failed try: again until they are
written or the partition moves away), and aborting transactions past their
timeout.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kafka.protocol.admin import DescribeTransactionsResponse, ListTransactionsResponse
from kafka.protocol.producer import (AddOffsetsToTxnResponse, AddPartitionsToTxnResponse,
                                     EndTxnResponse, InitProducerIdResponse)
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from cluster.log.errors import OffsetOutOfRangeError
from cluster.protocol import control
from cluster.protocol import errors as E
from cluster.protocol.frame import RequestHeader
from cluster.protocol.records import batch_headers
from cluster.server.fetcher import BrokerConnection
from cluster.server.internal_topic import InternalTopic
from cluster.server.metadata_cache import MetadataCache
from cluster.server.offsets_topic import GROUP_METADATA_TOPIC, partition_for
from cluster.server.transaction_coordinator import TransactionCoordinator
from cluster.server.transaction_log import (TRANSACTION_STATE_TOPIC, TransactionLogError,
                                            encode_key, encode_value)
from cluster.server.transaction_metadata import Markers, TransactionMetadata, TxnState
from cluster.server.txn_markers import OnMarker, write_markers

log = logging.getLogger(__name__)

LOAD_CHUNK_BYTES = 1 << 20
MARKER_RETRY_S = 0.5      # between tries of markers that failed


def wall_ms() -> int:
    return int(time.time() * 1000)


def state_name(state: TxnState) -> str:
    """Kafka's name of a state in the admin APIs: PREPARE_COMMIT -> PrepareCommit."""
    return "".join(w.capitalize() for w in state.name.split("_"))


class ProducerIds:
    """Producer ids claimed from ZooKeeper ahead of the coordinator's
    synchronous state machine, which takes one when an id needs one."""

    def __init__(self, zk: Any, broker_id: int):
        self.zk = zk
        self.broker_id = broker_id
        self.ready: list[int] = []

    async def ensure_one(self) -> None:
        if not self.ready:
            self.ready.append(await self.zk.call(self.zk.next_producer_id, self.broker_id))

    def take(self) -> int:
        return self.ready.pop()


class TransactionApis:
    """Handed the broker's config, its replica manager (the transaction
    log's partitions and the markers' partitions led here), its metadata
    cache (who leads what), its ZooKeeper client (producer ids, the
    topic's creation), and whom to tell of a marker written here (the group
    coordinator: offsets committed in the transaction)."""

    def __init__(self, cfg: Any, rm: Any, metadata: MetadataCache, zk: Any,
                 on_marker: OnMarker):
        self.cfg = cfg
        self.on_marker = on_marker
        self.rm = rm
        self.metadata = metadata
        self.broker_id = cfg.broker_id
        self.topic = InternalTopic(TRANSACTION_STATE_TOPIC,
                                   cfg["transaction.state.log.num.partitions"],
                                   cfg["transaction.state.log.replication.factor"], metadata, zk)
        self.offsets_partitions = lambda: len(metadata.partitions_of(GROUP_METADATA_TOPIC)) \
            or cfg["offsets.topic.num.partitions"]
        self.log_min_isr = cfg["transaction.state.log.min.isr"]
        self.timeout_s = cfg["request.timeout.ms"] / 1000
        self.ids = ProducerIds(zk, self.broker_id)
        self.coordinator = TransactionCoordinator(
            self.topic.partition_count, self._append, self._send_markers, self.ids.take, wall_ms,
            cfg["transaction.max.timeout.ms"], cfg["transaction.protocol"] == "kip-890")
        self._connections: dict[int, BrokerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._completing: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        self._expiry: asyncio.Task | None = None
        rm.add_leadership_listener(self.on_leadership_change)

    # -- requests ---------------------------------------------------------------------------

    async def init_producer_id(self, hdr: RequestHeader, req: Any) -> InitProducerIdResponse:
        try:
            await self.ids.ensure_one()
        except Exception as e:   # ZooKeeper unreachable: the client asks again
            log.warning("producer id allocation failed: %r", e)
            err, pid, epoch = E.COORDINATOR_NOT_AVAILABLE, -1, -1
        else:
            err, pid, epoch = await self.coordinator.init_producer_id(
                req.transactional_id, req.transaction_timeout_ms)
        log.info("InitProducerId %r from %r: %s, producer id %d epoch %d", req.transactional_id,
                 hdr.client_id, E.name(err), pid, epoch)
        return InitProducerIdResponse(version=hdr.api_version, throttle_time_ms=0,
                                      error_code=err, producer_id=pid, producer_epoch=epoch)

    async def add_partitions_to_txn(self, hdr: RequestHeader, req: Any
                                    ) -> AddPartitionsToTxnResponse:
        tps = {(t.name, p) for t in req.v3_and_below_topics or [] for p in t.partitions or []}
        unknown = {tp for tp in tps if self.metadata.partition(*tp) is None}
        if unknown:
            # As Kafka: nothing is added; the unknown ones say why, the others
            # OPERATION_NOT_ATTEMPTED.
            errors = {tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                      else E.OPERATION_NOT_ATTEMPTED for tp in tps}
        else:
            err = await self.coordinator.add_partitions(
                req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                req.v3_and_below_producer_epoch, tps)
            errors = dict.fromkeys(tps, err)
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, p), err in sorted(errors.items()):
            by_topic.setdefault(topic, []).append((p, err))
        return AddPartitionsToTxnResponse(version=hdr.api_version, throttle_time_ms=0,
                                          results_by_topic_v3_and_below=list(by_topic.items()))

    async def add_offsets_to_txn(self, hdr: RequestHeader, req: Any) -> AddOffsetsToTxnResponse:
        """The group's offsets partition joins the transaction (its offsets
        are then committed with TxnOffsetCommit to the group coordinator)."""
        tp = (GROUP_METADATA_TOPIC, partition_for(req.group_id, self.offsets_partitions()))
        err = await self.coordinator.add_partitions(req.transactional_id, req.producer_id,
                                                    req.producer_epoch, {tp})
        return AddOffsetsToTxnResponse(version=hdr.api_version, throttle_time_ms=0,
                                       error_code=err)

    async def end_txn(self, hdr: RequestHeader, req: Any) -> EndTxnResponse:
        """v5 (KIP-890) answers the producer id and epoch the next
        transaction uses: bumped under transaction.protocol=kip-890."""
        tid, v = req.transactional_id, hdr.api_version
        err = await self.coordinator.end_txn(tid, req.producer_id, req.producer_epoch,
                                             req.committed, client_follows_bump=v >= 5)
        log.debug("EndTxn v%d %r producer %d epoch %d %s: %s", v, tid, req.producer_id,
                 req.producer_epoch, "commit" if req.committed else "abort", E.name(err))
        if err == E.NONE:
            self._complete_soon(tid)
        fields: dict[str, Any] = {}
        if v >= 5:
            md = self.coordinator.current(tid) if err == E.NONE else None
            fields = {"producer_id": md.producer_id if md else -1,
                      "producer_epoch": md.producer_epoch if md else -1}
        return EndTxnResponse(version=v, throttle_time_ms=0, error_code=err, **fields)

    # -- the admin view (KIP-664): the ids this broker coordinates --------------------------

    async def describe_transactions(self, hdr: RequestHeader, req: Any
                                    ) -> DescribeTransactionsResponse:
        states = []
        for tid in req.transactional_ids or []:
            err, md = self.coordinator.describe(tid)
            topics: dict[str, list[int]] = {}
            for t, p in sorted(md.partitions if md else ()):
                topics.setdefault(t, []).append(p)
            states.append((err, tid, state_name(md.state) if md else "", md.timeout_ms if md
                           else 0, md.txn_start_ms if md else -1, md.producer_id if md else -1,
                           md.producer_epoch if md else -1, list(topics.items())))
        return DescribeTransactionsResponse(version=hdr.api_version, throttle_time_ms=0,
                                            transaction_states=states)

    async def list_transactions(self, hdr: RequestHeader, req: Any) -> ListTransactionsResponse:
        names = {state_name(s): s for s in TxnState}
        wanted = set(req.state_filters or [])
        pids = set(req.producer_id_filters or [])
        min_age = getattr(req, "duration_filter", -1)
        now = wall_ms()
        err, listed = self.coordinator.listing()
        states = [(md.transactional_id, md.producer_id, state_name(md.state)) for md in listed
                  if (not wanted or state_name(md.state) in wanted)
                  and (not pids or md.producer_id in pids)
                  and (min_age is None or min_age < 0 or (
                      md.txn_start_ms >= 0 and now - md.txn_start_ms >= min_age))]
        return ListTransactionsResponse(version=hdr.api_version, throttle_time_ms=0,
                                        error_code=err,
                                        unknown_state_filters=sorted(wanted - set(names)),
                                        transaction_states=states)

    # -- the coordinator's writes -------------------------------------------------------------

    async def _append(self, partition: int, md: TransactionMetadata) -> int:
        """One id's new state appended to its transaction-log partition, acks=all."""
        p = self.rm.partition((TRANSACTION_STATE_TOPIC, partition))
        if p is None or not p.is_leader:
            return E.NOT_LEADER_FOR_PARTITION
        b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
        b.append(0, wall_ms(), encode_key(md.transactional_id), encode_value(md), [])
        data = bytes(b.build())
        err, _, required = p.append_as_leader(data, batch_headers(data), -1, self.log_min_isr,
                                              self.cfg["message.max.bytes"])
        if err != E.NONE:
            return err
        if p.hw >= required:
            return p.ack_result()
        try:
            return await asyncio.wait_for(p.hw_waiters.add(required), self.timeout_s)
        except asyncio.TimeoutError:
            return E.REQUEST_TIMED_OUT

    async def _send_markers(self, markers: Markers) -> int:
        """Every partition's marker written (WriteTxnMarkers to its leader):
        NONE, or the first error (the caller tries again later). A partition
        whose topic is gone needs none, as in Kafka."""
        home = self.rm.partition((TRANSACTION_STATE_TOPIC,
                                  self.topic.partition_of(markers.transactional_id)))
        if home is None or not home.is_leader:
            return E.NOT_COORDINATOR
        by_leader: dict[int, list[control.TopicPartition]] = {}
        for topic, idx in sorted(markers.partitions):
            cp = self.metadata.partition(topic, idx)
            if cp is None:
                continue
            if cp.leader < 0:
                return E.LEADER_NOT_AVAILABLE
            by_leader.setdefault(cp.leader, []).append(control.TopicPartition(topic, idx))
        results = await asyncio.gather(*(
            self._markers_to(leader, control.TxnMarker(
                markers.producer_id, markers.producer_epoch, markers.commit, tuple(tps),
                home.leader_epoch))
            for leader, tps in by_leader.items()))
        for err in results:
            if err != E.NONE:
                return err
        return E.NONE

    async def _markers_to(self, leader: int, marker: control.TxnMarker) -> int:
        req = control.WriteTxnMarkersRequest((marker,))
        if leader == self.broker_id:
            resp = await write_markers(self.rm.partition, req.markers, self.rm.min_isr,
                                       self.timeout_s, self.on_marker)
        else:
            try:
                resp = await self._remote(leader, req)
            except (OSError, asyncio.TimeoutError, control.ProtocolError, ConnectionError) as e:
                log.info("WriteTxnMarkers to broker %d failed: %r", leader, e)
                return E.NETWORK_EXCEPTION
        for result in resp.markers:
            for pe in result.partitions:
                if pe.error not in (E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION):
                    log.info("marker of producer %d on %s-%d: %s", marker.producer_id,
                             pe.topic, pe.partition, E.name(pe.error))
                    return pe.error
        return E.NONE

    async def _remote(self, leader: int, req: control.WriteTxnMarkersRequest
                      ) -> control.WriteTxnMarkersResponse:
        """One request at a time per leader, on one connection (Kafka's marker channel)."""
        lock = self._locks.setdefault(leader, asyncio.Lock())
        async with lock:
            conn = self._connections.get(leader)
            endpoint = self.metadata.endpoint(leader)
            if endpoint is None:
                raise ConnectionError(f"broker {leader} is not live")
            if conn is None or not conn.connected or (conn.host, conn.port) != endpoint:
                if conn is not None:
                    conn.close()
                conn = BrokerConnection(endpoint[0], endpoint[1],
                                        f"txn-coordinator-{self.broker_id}", self.timeout_s,
                                        self.cfg.security)
                self._connections[leader] = conn
                await conn.connect()
            try:
                frame = await conn.request_frame(control.encode_request(req, 1))
                return control.decode_response(control.WRITE_TXN_MARKERS, frame)
            except BaseException:
                conn.close()
                raise

    # -- background: markers, loads, timeouts ------------------------------------------------

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _complete_soon(self, tid: str) -> None:
        if tid not in self._completing:
            self._completing.add(tid)
            self._spawn(self._complete(tid))

    async def _complete(self, tid: str) -> None:
        """Markers, then COMPLETE_x; tried again until written or the id moved away."""
        try:
            while True:
                err = await self.coordinator.complete(tid)
                if err in (E.NONE, E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS):
                    return
                await asyncio.sleep(MARKER_RETRY_S)
        finally:
            self._completing.discard(tid)

    def on_leadership_change(self, p: Any, is_leader: bool) -> None:
        if p.topic != TRANSACTION_STATE_TOPIC:
            return
        if not is_leader:
            self.coordinator.unload(p.partition)
            return
        if p.partition in self.coordinator.loading or p.partition in self.coordinator.loaded:
            return   # a new leader epoch of the same leader: nothing to load again
        self.coordinator.begin_load(p.partition)
        self._spawn(self._load(p))
        if self._expiry is None:
            self._expiry = self._spawn(self._abort_expired())

    async def _load(self, p: Any) -> None:
        records = []
        offset = p.log.log_start_offset
        while offset < p.leo:
            try:
                data = p.log.read(offset, LOAD_CHUNK_BYTES)
            except OffsetOutOfRangeError:
                offset = p.log.log_start_offset
                continue
            headers = batch_headers(data)
            if not headers:
                break
            for h in headers:
                if not h.is_control:
                    batch = DefaultRecordBatch(bytes(data[h.position:h.position + h.size]))
                    records += [(bytes(r.key or b""), None if r.value is None else bytes(r.value))
                                for r in batch]
            offset = headers[-1].next_offset
            await asyncio.sleep(0)
        if p.partition not in self.coordinator.loading or not p.is_leader:
            return   # it moved away meanwhile
        try:
            self.coordinator.load(p.partition, records)
        except TransactionLogError as e:
            log.error("%s-%d: cannot load: %s", TRANSACTION_STATE_TOPIC, p.partition, e)
            self.coordinator.unload(p.partition)
            return
        for tid in self.coordinator.prepared():
            self._complete_soon(tid)

    async def _abort_expired(self) -> None:
        interval = self.cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                for tid in await self.coordinator.abort_expired():
                    log.info("transaction of %r aborted: open past its timeout", tid)
            except Exception:
                log.exception("aborting expired transactions failed")

    async def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for conn in self._connections.values():
            conn.close()
