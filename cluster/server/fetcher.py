"""Replica fetchers: followers pulling from their leaders
(docs/design.md#replica-fetching).

As Kafka's ReplicaFetcherThread/AbstractFetcherThread: ONE fetcher per source
broker, fetching every partition this broker follows on that leader in one
Fetch request (with our replica id, so the leader records our LEO and reads
up to its LEO, not its HW). Each fetcher is an asyncio task with its own
connection; the leader long-polls the request (replica.fetch.wait.max.ms), so
an idle follower costs one request per wait period.

Per partition a fetcher keeps the next fetch offset (the local LEO) and
whether the partition must first be truncated. With
replication.truncation=leader-epoch, a partition that starts following is
first truncated KIP-101/KIP-279 style: send OffsetForLeaderEpoch for the
latest local epoch, truncate to the returned end offset, and repeat when the
leader answered with an earlier epoch that this replica does not end at the
same place (Kafka 2.0's getOffsetTruncationState). With `hw` the replica
manager truncated to the HW before adding the partition.

A partition whose fetch fails (not leader any more, unknown, I/O) is backed
off for replica.fetch.backoff.ms; the controller's next LeaderAndIsr moves it
to the right fetcher. With leader-epoch truncation every request names the
follower's leader epoch (KIP-320), and a partition the leader fences for an
older epoch waits for that LeaderAndIsr (docs/design.md#fencing).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import time
from typing import Any, Awaitable, Callable

from kafka.protocol.consumer import (FetchRequest, FetchResponse, ListOffsetsRequest,
                                     ListOffsetsResponse, OffsetForLeaderEpochRequest,
                                     OffsetForLeaderEpochResponse)

from cluster.log.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from cluster.log.errors import CorruptRecordError, InvalidOffsetError
from cluster.protocol import api
from cluster.protocol import errors as E
from cluster.security import PLAINTEXT, BrokerSecurity, request_frame

log = logging.getLogger(__name__)

# The first versions that carry the sender's leader epoch (KIP-320).
FETCH_VERSION = 9
OFFSET_FOR_LEADER_EPOCH_VERSION = 2

_SIZE = struct.Struct(">i")


class BrokerConnection:
    """A minimal client connection for broker-to-broker requests (one in
    flight), over the broker's security protocol (cluster/security.py)."""

    def __init__(self, host: str, port: int, client_id: str, timeout_s: float,
                 security: BrokerSecurity = PLAINTEXT):
        self.host, self.port = host, port
        self.client_id = client_id.encode()
        self.timeout_s = timeout_s
        self.security = security
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._corr = itertools.count(1)

    async def connect(self) -> None:
        self._reader, self._writer = await self.security.open_async(self.host, self.port,
                                                                    self.timeout_s)
        try:
            await self.security.authenticate_async(self.request)
        except BaseException:
            self.close()
            raise

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def request(self, api_key: int, version: int, body: bytes) -> bytes:
        """Send one request, return the response body (after the correlation id)."""
        corr = next(self._corr) & 0x7FFFFFFF
        self._writer.write(request_frame(api_key, version, corr, self.client_id, body))
        await self._writer.drain()

        async def read():
            (n,) = _SIZE.unpack(await self._reader.readexactly(4))
            return await self._reader.readexactly(n)

        frame = await asyncio.wait_for(read(), self.timeout_s)
        if _SIZE.unpack_from(frame, 0)[0] != corr:
            raise ConnectionError("correlation id mismatch")
        return frame[4:]

    async def request_frame(self, frame: bytes) -> bytes:
        """Send a whole pre-encoded request frame; return the response frame
        (correlation id included, size prefix removed)."""
        self._writer.write(frame)
        await self._writer.drain()

        async def read():
            (n,) = _SIZE.unpack(await self._reader.readexactly(4))
            return await self._reader.readexactly(n)

        return await asyncio.wait_for(read(), self.timeout_s)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = self._reader = None


class FetchState:
    """One partition's fetching from the source, for one leader epoch: a
    LeaderAndIsr replaces it with a new one. `leader_epoch` is sent with every
    request (-1 sends none); the leader `fenced` it when that epoch is older
    than its own, and it stays idle until the controller's next word
    (docs/design.md#fencing)."""
    __slots__ = ("offset", "truncating", "leader_epoch", "fenced", "delayed_until")

    def __init__(self, offset: int, truncating: bool, leader_epoch: int = -1):
        self.offset = offset
        self.truncating = truncating
        self.leader_epoch = leader_epoch
        self.fenced = False
        self.delayed_until = 0.0

    @property
    def fetchable(self) -> bool:
        return not self.truncating and not self.fenced


# A request in flight this long past the long poll is overdue (drop_overdue_request).
OVERDUE_S = 2.0

# The replica of a partition on this broker (a cluster.server.partition.Partition), or None.
PartitionOf = Callable[[tuple[str, int]], Any]


class ReplicaFetcher:
    """Fetches from one source broker for every partition this broker
    follows there. It is handed the broker's config, a lookup of local
    partitions and how to find the source's address: nothing more."""

    def __init__(self, cfg, partition_of: PartitionOf, source_id: int,
                 address_of: Callable[[int], "tuple[str, int] | None"],
                 lookup_address: "Callable[[int], Awaitable[tuple[str, int] | None]] | None" = None):
        self.partition_of = partition_of
        self.source_id = source_id
        self.address_of = address_of  # cached: what the controller last said
        self.lookup_address = lookup_address  # slow (ZooKeeper): nothing cached, or it failed
        self.replica_id = cfg.broker_id
        self.security = cfg.security
        self.max_wait_ms = cfg["replica.fetch.wait.max.ms"]
        self.min_bytes = cfg["replica.fetch.min.bytes"]
        self.max_bytes = cfg["replica.fetch.max.bytes"]
        self.backoff_s = cfg["replica.fetch.backoff.ms"] / 1000
        self.timeout_s = cfg["replica.socket.timeout.ms"] / 1000
        self.partitions: dict[tuple[str, int], FetchState] = {}
        self._wake = asyncio.Event()
        self._conn: BrokerConnection | None = None
        self._addr: tuple[str, int] | None = None  # where _conn goes
        # After a connect failed at the cached address: the source's
        # registration in ZooKeeper, and the cached address it replaces.
        self._registered: tuple[str, int] | None = None
        self._stale: tuple[str, int] | None = None
        self._sent_at: float | None = None          # when the request in flight went out
        self._stopped = False
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"fetcher-{cfg.broker_id}-from-{source_id}")

    # -- managed by the replica manager (event loop) -----------------------------------

    def add(self, tp: tuple[str, int], offset: int, truncating: bool,
            leader_epoch: int = -1) -> None:
        self.partitions[tp] = FetchState(offset, truncating, leader_epoch)
        self.drop_overdue_request()
        self._wake.set()

    def drop_overdue_request(self) -> None:
        """The source was named leader again, maybe a new incarnation at the
        same address: a request unanswered past the long poll may have gone
        to its dead predecessor, which never answers. Drop the connection
        rather than wait out the socket timeout (docs/design.md#replica-fetching)."""
        sent = self._sent_at
        if sent is None or time.monotonic() - sent <= self.max_wait_ms / 1000 + OVERDUE_S:
            return
        log.info("fetcher from broker %d: a request unanswered for %.1fs; reconnecting",
                 self.source_id, time.monotonic() - sent)
        self._disconnect()

    def remove(self, tp: tuple[str, int]) -> None:
        self.partitions.pop(tp, None)

    async def stop(self) -> None:
        self._stopped = True
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass
        if self._conn is not None:
            self._conn.close()

    # -- the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopped:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self._ensure_connected()
                if any(s.truncating and not s.fenced for s in self.partitions.values()):
                    await self._truncate()
                await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except (OSError, ConnectionError, asyncio.TimeoutError,
                    asyncio.IncompleteReadError) as e:
                log.warning("fetcher from broker %d: %s; retrying in %.1fs", self.source_id,
                            e or type(e).__name__, self.backoff_s)
                self._disconnect()
                await asyncio.sleep(self.backoff_s)
            except Exception:
                log.exception("fetcher from broker %d failed; retrying", self.source_id)
                self._disconnect()
                await asyncio.sleep(self.backoff_s)

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def _ensure_connected(self) -> None:
        addr = self.address_of(self.source_id)
        if self._registered is not None:
            if addr is not None and tuple(addr) != self._stale:
                self._registered = self._stale = None   # the cache learnt something newer
            else:
                addr = self._registered
        if self._conn is not None and self._conn.connected:
            if addr is None or tuple(addr) == self._addr:  # nothing newer known: keep it
                return
            # The leader moved (a restarted container gets a new IP, and its
            # old one may now be another broker's, even this one's): Kafka
            # keys its fetchers by the leader's endpoint for this reason.
            log.info("fetcher from broker %d: address changed from %s:%d to %s:%d; reconnecting",
                     self.source_id, *self._addr, *addr)
            self._disconnect()
        if addr is None and self.lookup_address is not None:
            addr = await self.lookup_address(self.source_id)
        if addr is None:
            raise ConnectionError(f"no address known for broker {self.source_id}")
        conn = BrokerConnection(addr[0], addr[1], f"replica-fetcher-{self.replica_id}",
                                self.timeout_s, self.security)
        try:
            await conn.connect()
        except (OSError, asyncio.TimeoutError):
            await self._look_up_registration(tuple(addr))
            raise
        self._conn, self._addr = conn, tuple(addr)
        log.info("fetcher connected to broker %d at %s:%d", self.source_id, *addr)

    async def _look_up_registration(self, failed: tuple[str, int]) -> None:
        """The cached address may be stale: the leader restarted at a new
        address after this broker last heard of it (V2 learns addresses from
        ZooKeeper's watches, which may come after the leadership;
        docs/design.md#replica-fetching). Its registration in ZooKeeper says
        where it is now; the next try goes there, until the cache changes."""
        if self.lookup_address is None:
            return
        try:
            registered = await self.lookup_address(self.source_id)
        except Exception as e:  # noqa: BLE001 - ZooKeeper away: keep the cached address
            log.warning("fetcher from broker %d: no registration read: %s", self.source_id, e)
            return
        if registered is not None and tuple(registered) != failed:
            log.info("fetcher from broker %d: %s:%d refused; registered at %s:%d",
                     self.source_id, *failed, *registered)
            self._registered = tuple(registered)
            self._stale = tuple(self.address_of(self.source_id) or failed)

    async def _fetch_once(self) -> None:
        now = time.monotonic()
        sent = {tp: s for tp, s in self.partitions.items()
                if s.fetchable and s.delayed_until <= now}
        if not sent:
            delays = [s.delayed_until for s in self.partitions.values() if s.fetchable]
            self._wake.clear()
            wait = max(0.01, min(delays) - now) if delays else self.backoff_s
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except asyncio.TimeoutError:
                pass
            return
        by_topic: dict[str, list] = {}
        offsets = {tp: s.offset for tp, s in sent.items()}
        for (t, p), s in sent.items():
            by_topic.setdefault(t, []).append(FetchRequest.FetchTopic.FetchPartition(
                partition=p, current_leader_epoch=s.leader_epoch, fetch_offset=s.offset,
                log_start_offset=-1, partition_max_bytes=self.max_bytes))
        req = FetchRequest(version=FETCH_VERSION, replica_id=self.replica_id,
                           max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes,
                           max_bytes=max(self.max_bytes * 10, 1 << 20), isolation_level=0,
                           session_id=0, session_epoch=-1, forgotten_topics_data=[],
                           topics=[FetchRequest.FetchTopic(topic=t, partitions=ps)
                                   for t, ps in by_topic.items()])
        self._sent_at = time.monotonic()
        try:
            body = await self._conn.request(api.FETCH, FETCH_VERSION,
                                            bytes(req.encode(version=FETCH_VERSION)))
        finally:
            self._sent_at = None
        resp = FetchResponse.decode(body, version=FETCH_VERSION)
        for topic_resp in resp.responses:
            for pd in topic_resp.partitions:
                tp = (topic_resp.topic, pd.partition_index)
                state = self.partitions.get(tp)
                # Removed or re-added (new leader epoch) while the fetch was out.
                if state is None or state is not sent.get(tp) or not state.fetchable \
                        or state.offset != offsets[tp]:
                    continue
                await self._process(tp, state, pd)

    async def _process(self, tp, state: FetchState, pd) -> None:
        p = self.partition_of(tp)
        if p is None or p.leader_id != self.source_id:
            self.partitions.pop(tp, None)
            return
        err = pd.error_code
        if err == E.NONE:
            try:
                if pd.records:
                    p.append_as_follower(pd.records)
                p.update_follower_hw(pd.high_watermark)
                state.offset = p.leo
            except (InvalidOffsetError, CorruptRecordError) as e:
                log.error("%s-%d: cannot append fetched data at %d: %s", tp[0], tp[1],
                          state.offset, e)
                state.offset = p.leo
                state.delayed_until = time.monotonic() + self.backoff_s
        elif err == E.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(tp, state, p)
        elif err == E.FENCED_LEADER_EPOCH:
            self._fence(tp, state, "Fetch")
        else:
            log.info("%s-%d: fetch from broker %d: %s; backing off", tp[0], tp[1],
                     self.source_id, E.name(err))
            state.delayed_until = time.monotonic() + self.backoff_s

    async def _list_offset(self, tp, timestamp: int) -> int:
        req = ListOffsetsRequest(version=1, replica_id=self.replica_id, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=tp[0], partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=tp[1], timestamp=timestamp)])])
        body = await self._conn.request(api.LIST_OFFSETS, 1, bytes(req.encode(version=1)))
        resp = ListOffsetsResponse.decode(body, version=1)
        pr = resp.topics[0].partitions[0]
        if pr.error_code != E.NONE:
            raise ConnectionError(f"ListOffsets {tp}: {E.name(pr.error_code)}")
        return pr.offset

    async def _handle_out_of_range(self, tp, state: FetchState, p) -> None:
        """Kafka's handleOffsetOutOfRange: if the leader's log ends before ours
        (an unclean leader), truncate to its end; if it starts after our end,
        restart our log at its start."""
        try:
            leader_leo = await self._list_offset(tp, -1)
            if leader_leo < p.leo:
                log.warning("%s-%d: leader %d LEO %d is behind ours %d: truncating",
                            tp[0], tp[1], self.source_id, leader_leo, p.leo)
                p.truncate_to(leader_leo)
            else:
                leader_start = await self._list_offset(tp, -2)
                log.warning("%s-%d: restarting log at leader %d's start offset %d", tp[0], tp[1],
                            self.source_id, leader_start)
                p.log.truncate_fully_and_start_at(leader_start)
                p.hw = leader_start
                p.rebuild_producer_state()
            state.offset = p.leo
        except ConnectionError as e:
            log.warning("%s-%d: out of range handling failed: %s", tp[0], tp[1], e)
            state.delayed_until = time.monotonic() + self.backoff_s

    async def _truncate(self) -> None:
        """KIP-101/KIP-279 truncation of the partitions marked truncating."""
        asks: dict[tuple[str, int], tuple[int, FetchState]] = {}
        for tp, s in list(self.partitions.items()):
            if not s.truncating or s.fenced:
                continue
            p = self.partition_of(tp)
            if p is None:
                self.partitions.pop(tp, None)
                continue
            epoch = p.log.leader_epoch_cache.latest_epoch
            if epoch == UNDEFINED_EPOCH:
                # No epoch information (an old or empty log): the HW is all we have.
                self._truncated(tp, s, p, p.hw, "no leader epoch in local log; to HW")
                continue
            asks[tp] = (epoch, s)
        if not asks:
            return
        by_topic: dict[str, list] = {}
        for (t, part), (epoch, s) in asks.items():
            by_topic.setdefault(t, []).append(
                OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                    partition=part, current_leader_epoch=s.leader_epoch, leader_epoch=epoch))
        v = OFFSET_FOR_LEADER_EPOCH_VERSION
        req = OffsetForLeaderEpochRequest(version=v, topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=ps)
            for t, ps in by_topic.items()])
        body = await self._conn.request(api.OFFSET_FOR_LEADER_EPOCH, v,
                                        bytes(req.encode(version=v)))
        resp = OffsetForLeaderEpochResponse.decode(body, version=v)
        for tr in resp.topics:
            for r in tr.partitions:
                tp = (tr.topic, r.partition)
                s = self.partitions.get(tp)
                p = self.partition_of(tp)
                # The answer is for the state that asked: a state re-added
                # meanwhile (a new leader epoch) asks again.
                if tp not in asks or s is not asks[tp][1] or not s.truncating or p is None:
                    continue
                if r.error_code == E.FENCED_LEADER_EPOCH:
                    self._fence(tp, s, "OffsetForLeaderEpoch")
                    continue
                if r.error_code != E.NONE:
                    log.info("%s-%d: OffsetForLeaderEpoch from %d: %s", tp[0], tp[1],
                             self.source_id, E.name(r.error_code))
                    s.delayed_until = time.monotonic() + self.backoff_s
                    continue
                self._apply_epoch_answer(tp, s, p, asks[tp][0], r.leader_epoch, r.end_offset)

    def _apply_epoch_answer(self, tp, s: FetchState, p, asked: int, leader_epoch: int,
                            leader_end: int) -> None:
        leo = p.leo
        if leader_end == UNDEFINED_EPOCH_OFFSET:
            self._truncated(tp, s, p, p.hw, f"leader has no end offset for epoch {asked}; to HW")
        elif leader_epoch == UNDEFINED_EPOCH:  # a v0 answer
            self._truncated(tp, s, p, min(leader_end, leo), f"epoch {asked} ends at {leader_end}")
        else:
            f_epoch, f_end = p.log.leader_epoch_cache.end_offset_for(leader_epoch, leo)
            if f_end == UNDEFINED_EPOCH_OFFSET:
                self._truncated(tp, s, p, min(leader_end, leo),
                                f"leader epoch {leader_epoch} ends at {leader_end}")
            elif f_epoch != leader_epoch:
                # We never had the leader's epoch: cut back to where our largest
                # epoch below it ends and ask again for that one (KIP-279).
                target = min(f_end, leo)
                p.truncate_to(target)
                log.info("%s-%d: leader-epoch truncation: leader answered epoch %d end %d, "
                         "ours is epoch %d end %d; truncated to %d, asking again",
                         tp[0], tp[1], leader_epoch, leader_end, f_epoch, f_end, p.leo)
                s.offset = p.leo
            else:
                self._truncated(tp, s, p, min(leader_end, f_end),
                                f"epoch {leader_epoch} ends at {leader_end} on the leader")

    def _fence(self, tp, s: FetchState, what: str) -> None:
        """The leader is in a newer epoch than ours: the controller could not
        tell us, and what we would fetch may not continue our log. Idle until
        its LeaderAndIsr re-adds the partition (docs/design.md#fencing)."""
        s.fenced = True
        log.warning("%s-%d: %s from broker %d: FENCED_LEADER_EPOCH (our leader epoch %d is "
                    "older than the leader's); not fetching until the controller's next "
                    "LeaderAndIsr", tp[0], tp[1], what, self.source_id, s.leader_epoch)

    def _truncated(self, tp, s: FetchState, p, offset: int, why: str) -> None:
        before = p.leo
        p.truncate_to(offset)
        log.info("%s-%d: truncation before fetching from %d: %s (LEO %d -> %d)", tp[0], tp[1],
                 self.source_id, why, before, p.leo)
        s.truncating = False
        s.offset = p.leo


class FetcherManager:
    """Fetchers keyed by source broker; a fetcher with no partitions left is stopped."""

    def __init__(self, cfg, partition_of: PartitionOf, address_of, lookup_address=None):
        self.cfg = cfg
        self.partition_of = partition_of
        self.address_of = address_of
        self.lookup_address = lookup_address
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._by_partition: dict[tuple[str, int], int] = {}

    def add(self, tp, leader: int, offset: int, truncating: bool,
            leader_epoch: int = -1) -> None:
        self.remove(tp)
        f = self.fetchers.get(leader)
        if f is None:
            f = self.fetchers[leader] = ReplicaFetcher(self.cfg, self.partition_of, leader,
                                                       self.address_of, self.lookup_address)
        f.add(tp, offset, truncating, leader_epoch)
        self._by_partition[tp] = leader

    def remove(self, tp) -> None:
        leader = self._by_partition.pop(tp, None)
        if leader is None:
            return
        f = self.fetchers.get(leader)
        if f is not None:
            f.remove(tp)
            if not f.partitions:
                del self.fetchers[leader]
                asyncio.get_running_loop().create_task(f.stop())

    def source_of(self, tp) -> int | None:
        return self._by_partition.get(tp)

    def drop_overdue_request(self, leader: int) -> None:
        f = self.fetchers.get(leader)
        if f is not None:
            f.drop_overdue_request()

    async def shutdown(self) -> None:
        fs, self.fetchers = list(self.fetchers.values()), {}
        self._by_partition.clear()
        for f in fs:
            await f.stop()
