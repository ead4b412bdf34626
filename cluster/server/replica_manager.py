"""ReplicaManager: every partition replica on this broker, and what the
controller tells the broker to do with them (docs/design.md#leader-and-isr,
docs/design.md#isr).

Concurrency model (the whole broker): ONE asyncio event loop owns all
partition state: the socket server, request handling, the replica fetchers
(one task per source broker), the purgatory, the ISR expiration and HW
checkpoint timers all run on it, so partition state needs no locks and every
state change is atomic with respect to every other one. Blocking work leaves
the loop: ZooKeeper calls run on the ZooKeeper thread (zk_client.ZkClient.call),
checkpoint files and flushes on the default executor. Kazoo's callbacks come
back to the loop with call_soon_threadsafe. The controller component, when
present, runs its own threads and talks to this broker over its socket, like
to any other broker. Log appends and reads run on the loop: they are
page-cache writes and reads (the log fsyncs only on roll, flush policy or
shutdown).

Requests from the controller carry its epoch; an epoch older than the newest
seen is STALE_CONTROLLER_EPOCH. A LeaderAndIsr partition entry whose leader
epoch is not newer than the replica's is ignored (and logged) and answered
with error 0, not Kafka's per-partition STALE_CONTROLLER_EPOCH: see
_apply_partition_state. Every state change received and completed is logged
on one `state-change:` line.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from cluster.log import LogManager
from cluster.protocol import control
from cluster.protocol import errors as E
from cluster.protocol.control import (LeaderAndIsrRequest, LeaderAndIsrResponse, PartitionError,
                                      StopReplicaRequest, StopReplicaResponse,
                                      UpdateMetadataRequest, UpdateMetadataResponse)
from cluster.server.fetcher import FetcherManager
from cluster.server.metadata_cache import MetadataCache
from cluster.server.partition import Partition
from cluster.server.zk_client import BadVersionError, ZkClient
from cluster.zkpaths import LeaderAndIsr

log = logging.getLogger(__name__)
state_log = logging.getLogger("state.change")


def _other_topic(local_id: str | None, topic_id: str) -> bool:
    """Whether a local replica with `local_id` belongs to another topic than
    one with `topic_id` (unknown ids match anything: topics without ids)."""
    return bool(local_id and topic_id and local_id != topic_id)


def _stale_replica(tp: tuple[str, int], local_id: str | None,
                   assigned: dict[tuple[str, int], str]) -> str | None:
    """Why a local replica must go (docs/design.md#broker-startup): not
    assigned to this broker any more, or assigned under another topic id
    (deleted, maybe created again). None: it stays."""
    if tp not in assigned:
        return "no longer assigned to this broker"
    if _other_topic(local_id, assigned[tp]):
        return f"it belongs to topic id {local_id}, the topic now has id {assigned[tp]}"
    return None


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class ReplicaManager:
    def __init__(self, cfg, log_manager: LogManager, zk: ZkClient | None,
                 metadata: MetadataCache, start_epoch: int = -1,
                 announce_isr_changes: bool = True):
        self.cfg = cfg
        self.broker_id = cfg.broker_id
        self.start_epoch = start_epoch  # this incarnation's (zk_client.bump_start_epoch)
        self.log_manager = log_manager
        self.zk = zk
        self.metadata = metadata
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.controller_epoch = -1
        self.truncation = cfg["replication.truncation"]
        self.min_isr = cfg["min.insync.replicas"]
        self.lag_ms = cfg["replica.lag.time.max.ms"]
        self.lag_messages = cfg["replica.lag.max.messages"]
        self.peer_addresses = cfg.peer_addresses()
        self.leader_addresses: dict[int, tuple[str, int]] = {}
        self.fetchers = FetcherManager(cfg, self.partition, self._cached_address_of,
                                       self._zk_address_of if self.zk is not None else None)
        self._tasks: list[asyncio.Task] = []
        self._isr_changes: set[tuple[str, int]] = set()
        self._isr_notify_scheduled = False
        # Only a controller reads ISR-change notifications (V2 has none).
        self._notify_isr = announce_isr_changes
        # Told (partition, is_leader) when this broker starts or stops
        # leading a partition: how the group coordinator follows the offsets
        # partitions (docs/design.md#groups).
        self._leadership_listeners: list[Callable[[Partition, bool], None]] = []

    def add_leadership_listener(self, listener: Callable[[Partition, bool], None]) -> None:
        self._leadership_listeners.append(listener)

    def _tell_leadership(self, p: Partition, is_leader: bool) -> None:
        for listener in self._leadership_listeners:
            try:
                listener(p, is_leader)
            except Exception:
                log.exception("leadership listener failed for %s-%d", p.topic, p.partition)

    # -- startup / shutdown -------------------------------------------------------------

    def load(self, assigned: dict[tuple[str, int], str] | None) -> None:
        """Open local logs; delete those no longer assigned to this broker, or
        assigned under another topic id (deleted while it was down, maybe
        created again: docs/design.md#broker-startup); HW = min(checkpoint, LEO).
        `assigned` maps each partition assigned here to its topic id ("" unknown)."""
        logs = self.log_manager.load_existing()
        hws = self.log_manager.read_high_watermarks()
        for tp, lg in logs.items():
            why = None if assigned is None else _stale_replica(tp, lg.topic_id, assigned)
            if why:
                log.info("deleting local replica %s-%d: %s", tp[0], tp[1], why)
                self.log_manager.delete_log(*tp)
                continue
            p = self._new_partition(tp, lg)
            p.init_hw(hws.get(tp))
            p.rebuild_producer_state()
            log.info("loaded replica %s", p.describe())

    def delete_unassigned(self, assigned: dict[tuple[str, int], str]) -> None:
        """What load() does at startup, for a broker that registers again
        after its ZooKeeper session expired: stop and delete the replicas no
        longer assigned here, or assigned under another topic id (deleted,
        maybe created again, while the controller counted this broker dead and
        sent it nothing: docs/design.md#broker-startup)."""
        for tp, p in sorted(self.partitions.items()):
            why = _stale_replica(tp, p.log.topic_id, assigned)
            if why:
                log.info("deleting local replica %s-%d: %s", tp[0], tp[1], why)
                self._stop_replica(tp, delete=True)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._isr_expiration_loop(), name="isr-expiration"))
        self._tasks.append(loop.create_task(self._hw_checkpoint_loop(), name="hw-checkpoint"))
        self._tasks.append(loop.create_task(self._retention_loop(), name="log-retention"))

    async def shutdown(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.fetchers.shutdown()
        for p in self.partitions.values():
            p.stop()
        self.checkpoint_hws()

    def partition(self, tp: tuple[str, int]) -> Partition | None:
        """This broker's replica of tp, or None."""
        return self.partitions.get(tp)

    def _new_partition(self, tp, lg) -> Partition:
        p = Partition(tp[0], tp[1], lg, self.broker_id, now_ms())
        p.min_isr = self.min_isr
        self.partitions[tp] = p
        return p

    def _cached_address_of(self, broker_id: int):
        """Where a broker is, by config or as the controller last told us; None if neither says."""
        return (self.peer_addresses.get(broker_id) or self.leader_addresses.get(broker_id)
                or self.metadata.endpoint(broker_id))

    async def _zk_address_of(self, broker_id: int):
        reg = await self.zk.call(self.zk.broker_registration, broker_id)
        return (reg.host, reg.port) if reg is not None else None

    # -- controller epoch -----------------------------------------------------------------

    def _check_controller_request(self, name: str, req) -> int:
        """E.NONE, or why a controller request must be refused: it is meant
        for another broker or an earlier incarnation of this one (its
        address was reused: docs/design.md#controller-epoch), or it comes
        from a controller older than the newest seen."""
        if (req.broker_id >= 0 and req.broker_id != self.broker_id) or (
                req.broker_epoch != -1 and req.broker_epoch < self.start_epoch):
            state_log.warning(
                "state-change: broker=%d rejected %s controller_id=%d controller_epoch=%d "
                "reason=not-for-this-broker broker_id=%d broker_epoch=%d start_epoch=%d",
                self.broker_id, name, req.controller_id, req.controller_epoch, req.broker_id,
                req.broker_epoch, self.start_epoch)
            return E.STALE_BROKER_EPOCH
        if not self._check_controller_epoch(name, req.controller_id, req.controller_epoch):
            return E.STALE_CONTROLLER_EPOCH
        return E.NONE

    def _check_controller_epoch(self, name: str, controller_id: int, epoch: int) -> bool:
        if epoch < self.controller_epoch:
            state_log.warning(
                "state-change: broker=%d rejected %s controller_id=%d controller_epoch=%d "
                "reason=stale-controller-epoch latest_controller_epoch=%d",
                self.broker_id, name, controller_id, epoch, self.controller_epoch)
            return False
        self.controller_epoch = epoch
        return True

    def _state_line(self, what: str, change: str, topic: str, partition: int, leader: int,
                    leader_epoch: int, controller_id: int, controller_epoch: int,
                    extra: str = "") -> None:
        state_log.info(
            "state-change: broker=%d %s %s topic=%s partition=%d leader=%d leader_epoch=%d "
            "controller_id=%d controller_epoch=%d%s", self.broker_id, what, change, topic,
            partition, leader, leader_epoch, controller_id, controller_epoch, extra)

    # -- LeaderAndIsr (docs/design.md#leader-and-isr) ----------------------------------------

    def handle_leader_and_isr(self, req: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        err = self._check_controller_request("leader-and-isr", req)
        if err != E.NONE:
            return control.response_for(req, err)
        for b in req.live_leaders:
            self.leader_addresses[b.id] = (b.host, b.port)
        results = []
        for s in req.partition_states:
            change = "become-leader" if s.leader == self.broker_id else "become-follower"
            self._state_line("received", change, s.topic, s.partition, s.leader, s.leader_epoch,
                             req.controller_id, req.controller_epoch)
            try:
                err = self._apply_partition_state(s, req, change)
            except Exception:
                log.exception("%s for %s-%d failed", change, s.topic, s.partition)
                err = E.KAFKA_STORAGE_ERROR
            results.append(PartitionError(s.topic, s.partition, err))
        if req.init:
            listed = {(s.topic, s.partition) for s in req.partition_states}
            for tp in [tp for tp in self.partitions if tp not in listed]:
                self._state_line("received", "delete-replica", tp[0], tp[1], -1, -1,
                                 req.controller_id, req.controller_epoch, " reason=init")
                self._stop_replica(tp, delete=True)
                self._state_line("completed", "delete-replica", tp[0], tp[1], -1, -1,
                                 req.controller_id, req.controller_epoch, " reason=init")
        return LeaderAndIsrResponse(E.NONE, tuple(results))

    def _apply_partition_state(self, s, req, change: str) -> int:
        tp = (s.topic, s.partition)
        p = self.partitions.get(tp)
        if p is not None and _other_topic(p.log.topic_id, s.topic_id):
            # An earlier topic of that name, deleted while we could not hear
            # it: its records are not this topic's (docs/design.md#topic-ids).
            self._state_line("received", "delete-replica", tp[0], tp[1], -1, -1,
                             req.controller_id, req.controller_epoch,
                             f" reason=topic-id local={p.log.topic_id} new={s.topic_id}")
            self._stop_replica(tp, delete=True)
            p = None
        if p is not None and s.leader_epoch <= p.leader_epoch:
            # Kafka (1.0+) answers STALE_CONTROLLER_EPOCH (11) for this entry
            # and its controller ignores per-partition errors. Ours does not:
            # Controller._on_response takes any per-partition 11 for a
            # rejection of its controller epoch (a zombie), logs "rejected"
            # records in the state-change log and checks for a newer
            # controller. A live controller resends unchanged leader epochs
            # (the INIT LeaderAndIsr of every failover, retries), so 11 here
            # would flag it as a zombie each time: answer 0.
            self._state_line("ignored", change, s.topic, s.partition, s.leader, s.leader_epoch,
                             req.controller_id, req.controller_epoch,
                             f" reason=stale-leader-epoch current_leader_epoch={p.leader_epoch}")
            return E.NONE
        if self.broker_id not in s.replicas:
            self._state_line("ignored", change, s.topic, s.partition, s.leader, s.leader_epoch,
                             req.controller_id, req.controller_epoch,
                             " reason=not-in-assigned-replicas")
            return E.UNKNOWN_TOPIC_OR_PARTITION
        if p is None:  # startReplica: create the partition directory
            p = self._new_partition(tp, self.log_manager.get_or_create_log(*tp))
            p.init_hw(0)
        if s.topic_id and p.log.topic_id is None:
            p.log.set_topic_id(s.topic_id)
        if s.leader == self.broker_id:
            self._become_leader(p, s, req.controller_epoch)
        else:
            self._become_follower(p, s, req.controller_epoch)
        self._state_line("completed", change, s.topic, s.partition, s.leader, s.leader_epoch,
                         req.controller_id, req.controller_epoch,
                         f" isr={','.join(map(str, s.isr))} hw={p.hw} leo={p.leo}")
        return E.NONE

    def _become_leader(self, p: Partition, s, controller_epoch: int) -> None:
        # Stop fetching first: after this nothing from the old leader is appended.
        self.fetchers.remove(p.tp)
        p.make_leader(s.replicas, s.isr, s.leader_epoch, s.zk_version, controller_epoch,
                      now_ms())
        self._tell_leadership(p, True)

    def _become_follower(self, p: Partition, s, controller_epoch: int) -> None:
        # With `hw` truncation a follower of the same leader keeps fetching as
        # it was (Kafka 0.8). With leader epochs every new epoch truncates
        # again: the epochs in between may have had other leaders whose
        # records replaced ours (docs/design.md#leader-and-isr).
        same_leader = (self.truncation == "hw" and not p.is_leader
                       and p.leader_id == s.leader and s.leader >= 0
                       and self.fetchers.source_of(p.tp) == s.leader)
        p.make_follower(s.replicas, s.isr, s.leader, s.leader_epoch, s.zk_version,
                        controller_epoch)
        self._tell_leadership(p, False)
        if same_leader:
            self.fetchers.drop_overdue_request(s.leader)   # a restarted leader, maybe
            return  # already following that leader (Kafka 0.8 skips the restart too)
        self.fetchers.remove(p.tp)
        if self.truncation == "hw":
            # `hw` truncation (docs/design.md#truncation): truncate to the HW, fetch from LEO.
            p.truncate_to(p.hw)
        if s.leader >= 0:
            # Leader epochs also fence (docs/design.md#fencing); `hw` followers
            # name none, as in Kafka 0.8.
            epochs = self.truncation == "leader-epoch"
            self.fetchers.add(p.tp, s.leader, p.leo, truncating=epochs,
                              leader_epoch=s.leader_epoch if epochs else -1)

    # -- StopReplica ------------------------------------------------------------------------

    def handle_stop_replica(self, req: StopReplicaRequest) -> StopReplicaResponse:
        err = self._check_controller_request("stop-replica", req)
        if err != E.NONE:
            return control.response_for(req, err)
        results = []
        extra = f" delete={str(req.delete_partitions).lower()}"
        for tp in req.partitions:
            p = self.partitions.get((tp.topic, tp.partition))
            lead = p.leader_id if p else -1
            epoch = p.leader_epoch if p else -1
            self._state_line("received", "stop-replica", tp.topic, tp.partition, lead, epoch,
                             req.controller_id, req.controller_epoch, extra)
            err = E.NONE
            try:
                self._stop_replica((tp.topic, tp.partition), req.delete_partitions)
            except Exception:
                log.exception("stop-replica %s-%d failed", tp.topic, tp.partition)
                err = E.KAFKA_STORAGE_ERROR
            self._state_line("completed", "stop-replica", tp.topic, tp.partition, lead, epoch,
                             req.controller_id, req.controller_epoch, extra)
            results.append(PartitionError(tp.topic, tp.partition, err))
        return StopReplicaResponse(E.NONE, tuple(results))

    def _stop_replica(self, tp, delete: bool) -> None:
        self.fetchers.remove(tp)
        p = self.partitions.get(tp)
        if p is not None:
            p.stop()
            self._tell_leadership(p, False)
        if delete:
            self.partitions.pop(tp, None)
            if self.log_manager.get_log(*tp) is not None:
                self.log_manager.delete_log(*tp)

    # -- UpdateMetadata ---------------------------------------------------------------------

    def handle_update_metadata(self, req: UpdateMetadataRequest) -> UpdateMetadataResponse:
        err = self._check_controller_request("update-metadata", req)
        if err != E.NONE:
            return control.UpdateMetadataResponse(err)
        self.metadata.update(req)
        state_log.info("state-change: broker=%d completed update-metadata partitions=%d "
                       "live_brokers=%s controller_id=%d controller_epoch=%d", self.broker_id,
                       len(req.partition_states), ",".join(str(b.id) for b in req.live_brokers),
                       req.controller_id, req.controller_epoch)
        return UpdateMetadataResponse(E.NONE)

    # -- ISR maintenance on the leader (docs/design.md#isr) --------------------------------------

    def on_follower_fetch(self, p: Partition, replica_id: int, fetch_offset: int) -> None:
        if p.record_follower_fetch(replica_id, fetch_offset, now_ms()):
            new = p.expanded_isr()
            if new is not None:
                self._change_isr(p, new, "expand")

    async def _isr_expiration_loop(self) -> None:
        interval = max(0.05, self.lag_ms / 2000)
        while True:
            await asyncio.sleep(interval)
            t = now_ms()
            for p in list(self.partitions.values()):
                if p.is_leader and not p.fenced:
                    new = p.shrunk_isr(t, self.lag_ms, self.lag_messages)
                    if new is not None:
                        self._change_isr(p, new, "shrink")

    def _change_isr(self, p: Partition, new_isr: frozenset[int], why: str) -> None:
        if p.isr_update_in_flight or p.fenced or self.zk is None:
            return
        p.isr_adding = new_isr - p.isr
        p.isr_update_in_flight = True
        asyncio.get_running_loop().create_task(self._write_isr(p, new_isr, why))

    async def _write_isr(self, p: Partition, new_isr: frozenset[int], why: str) -> None:
        """Conditional write of the new ISR (leader, epochs unchanged) at the
        zkVersion we hold; only after it succeeds does the ISR change here."""
        epoch, version, adding = p.leader_epoch, p.zk_version, p.isr_adding
        new = LeaderAndIsr(self.broker_id, epoch, tuple(sorted(new_isr)), p.controller_epoch,
                           version)
        try:
            new_version = await self.zk.call(self.zk.update_isr, p.topic, p.partition, new)
        except BadVersionError:
            if p.leader_epoch == epoch and p.is_leader:
                log.warning("%s-%d: ISR %s failed: leaderAndISR is no longer at version %d; "
                            "this broker stops accepting writes for it until the controller "
                            "says otherwise", p.topic, p.partition, why, version)
                p.fence()
            return
        except Exception as e:
            log.warning("%s-%d: ISR %s to %s failed: %r; will retry", p.topic, p.partition, why,
                        sorted(new_isr), e)
            return
        finally:
            p.isr_update_in_flight = False
            if p.isr_adding is adding:    # not a later change's (after a LeaderAndIsr)
                p.isr_adding = frozenset()
        if p.leader_epoch != epoch or not p.is_leader:
            return  # a LeaderAndIsr arrived meanwhile and rules
        log.info("%s-%d: ISR %s %s -> %s (zkVersion %d)", p.topic, p.partition, why,
                 sorted(p.isr), sorted(new_isr), new_version)
        p.apply_isr(new_isr, new_version)
        if not self._notify_isr:
            return
        self._isr_changes.add(p.tp)
        if not self._isr_notify_scheduled:
            self._isr_notify_scheduled = True
            asyncio.get_running_loop().create_task(self._notify_isr_changes())

    async def _notify_isr_changes(self) -> None:
        """One /isr_change_notification znode per burst of ISR changes (as Kafka
        0.9), so the controller refreshes everyone's metadata."""
        await asyncio.sleep(0.05)
        changes, self._isr_changes = sorted(self._isr_changes), set()
        self._isr_notify_scheduled = False
        try:
            await self.zk.call(self.zk.notify_isr_change, changes)
        except Exception as e:
            log.warning("ISR change notification for %s failed: %r", changes, e)

    # -- HW checkpoint, retention ------------------------------------------------------------

    def high_watermarks(self) -> dict[tuple[str, int], int]:
        return {tp: p.hw for tp, p in self.partitions.items()}

    def checkpoint_hws(self) -> None:
        self.log_manager.checkpoint_high_watermarks(self.high_watermarks())

    async def _hw_checkpoint_loop(self) -> None:
        interval = self.cfg["replica.high.watermark.checkpoint.interval.ms"] / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            try:
                await loop.run_in_executor(None, self.log_manager.checkpoint_high_watermarks,
                                           self.high_watermarks())
            except Exception:
                log.exception("HW checkpoint failed")

    async def _retention_loop(self) -> None:
        interval = self.cfg["log.retention.check.interval.ms"] / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            try:
                await loop.run_in_executor(None, lambda hws: self.log_manager.apply_retention(
                    high_watermarks=hws), self.high_watermarks())
            except Exception:
                log.exception("log retention failed")
