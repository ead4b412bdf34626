"""The controller mode (cluster/coordination.py): admin commands write the
znodes the controller watches, and each broker runs the controller
component, which the elected one makes active (docs/design.md#controller).
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from typing import Any, Callable

from kazoo.exceptions import NodeExistsError, NoNodeError

from cluster import zkpaths
from cluster.coordination import AdminError
from cluster.controller.controller import Controller
from cluster.protocol import control
from cluster.protocol import errors as E
from cluster.server.fetcher import BrokerConnection
from cluster.zkpaths import TopicAssignment

log = logging.getLogger(__name__)
TP = tuple[str, int]


class ControllerCoordination:
    name = "controller"
    has_controller = True
    waits_for_brokers = False    # a command writes a znode; the controller acts later

    # -- admin commands: the znodes the controller watches (docs/design.md#topics) ------------

    def create_topic(self, zk: Any, topic: str, assignment: dict[int, list[int]],
                     timeout_s: float) -> None:
        if zk.exists(zkpaths.delete_topic_path(topic)):
            raise AdminError(f"topic {topic!r} is marked for deletion; try again when it is gone")
        data = TopicAssignment({p: tuple(r) for p, r in assignment.items()},
                               zkpaths.new_topic_id()).encode()
        zk.ensure_path(zkpaths.TOPICS)
        try:
            zk.create(zkpaths.topic_path(topic), data)
        except NodeExistsError:
            raise AdminError(f"topic {topic!r} already exists") from None

    def delete_topic(self, zk: Any, topic: str, timeout_s: float) -> list[int]:
        """Mark the topic for deletion; the controller stops its replicas
        (those of a broker that is down when it returns) and removes its
        znodes."""
        try:
            zk.create(zkpaths.delete_topic_path(topic), b"", makepath=True)
        except NodeExistsError:
            pass
        return []

    def add_partitions(self, zk: Any, topic: str, new: dict[int, list[int]],
                       timeout_s: float) -> None:
        if zk.exists(zkpaths.partitions_add_path(topic)):
            raise AdminError(f"a partition add for {topic!r} is already in progress")
        _request(zk, zkpaths.partitions_add_path(topic),
                 {str(p): zkpaths.dumps(list(r)) for p, r in new.items()}, "new partitions")

    def remove_partitions(self, zk: Any, topic: str, partitions: list[int],
                          timeout_s: float) -> list[int]:
        _request(zk, zkpaths.partitions_remove_path(topic), {str(p): b"" for p in set(partitions)},
                 "the removal")
        return []

    def start_reassignment(self, zk: Any, plan: dict[TP, list[int]]) -> None:
        try:
            zk.create(zkpaths.REASSIGN_PARTITIONS, zkpaths.encode_reassignment(plan), makepath=True)
        except NodeExistsError:
            raise AdminError("a partition reassignment is already in progress") from None

    def reassigning(self, zk: Any, tps: set[TP]) -> set[TP]:
        try:
            return set(zkpaths.decode_reassignment(zk.get(zkpaths.REASSIGN_PARTITIONS)[0])) & tps
        except NoNodeError:
            return set()

    def elect_preferred(self, zk: Any, tps: list[TP], timeout_s: float) -> list[TP]:
        """Ask; the controller elects and removes the request."""
        self.ask_preferred(zk, tps)
        return []

    def ask_preferred(self, zk: Any, tps: list[TP]) -> None:
        try:
            zk.create(zkpaths.PREFERRED_REPLICA_ELECTION, zkpaths.encode_partition_list(tps),
                      makepath=True)
        except NodeExistsError:
            raise AdminError("a preferred replica election is already in progress") from None

    def preferred_pending(self, zk: Any, tps: list[TP]) -> list[TP]:
        """All of them while the request is there: the controller removes it
        once it elected (docs/design.md#preferred-election)."""
        return list(tps) if zk.exists(zkpaths.PREFERRED_REPLICA_ELECTION) else []

    def end_preferred(self, zk: Any) -> None:
        """Nothing: the controller removes the request."""

    def component(self, cfg: Any, zk: Any, rm: Any, metadata: Any,
                  start_epoch: Callable[[], int]) -> "ControllerComponent":
        return ControllerComponent(cfg, zk, rm, start_epoch)


def _request(zk: Any, parent: str, children: dict[str, bytes], what: str) -> None:
    """Create `children` of `parent` in one transaction. The controller
    deletes an admin parent znode once it has handled its last child, so the
    children go in together (one by one, the controller could handle the
    first and delete the parent before the next was created), and a parent
    deleted between its creation and the transaction is created again."""
    for _ in range(5):
        zk.ensure_path(parent)
        tx = zk.transaction()
        for name, data in sorted(children.items()):
            tx.create(f"{parent}/{name}", data)
        res = tx.commit()
        failed = [r for r in res if isinstance(r, Exception)]
        if not failed:
            return
        if any(isinstance(r, NodeExistsError) for r in failed):
            raise AdminError(f"{what} is already requested and not yet done; try again later")
        if not any(isinstance(r, NoNodeError) for r in failed):
            raise AdminError(f"could not request {what}: {failed}")
    raise AdminError(f"could not request {what}: {parent} kept disappearing")


class ControllerComponent:
    """The controller component of one broker (absent with
    chaoslog.controller.enable=false: a broker that never becomes
    controller), and the broker's side of a controlled shutdown."""

    def __init__(self, cfg: Any, zk: Any, rm: Any, start_epoch: Callable[[], int]):
        self.cfg = cfg
        self.broker_id = cfg.broker_id
        self.zk = zk
        self.rm = rm
        self.start_epoch = start_epoch
        self.controller: Controller | None = None

    async def assigned_replicas(self) -> dict[TP, str]:
        """Each partition ZooKeeper assigns to this broker, with its topic id.
        A replica a pending reassignment is moving here is in the new
        replicas (RAR) only, not yet in the assignment: it counts too
        (docs/design.md#broker-startup). Read first, so that a reassignment
        completing meanwhile shows in the assignment read next."""
        reassigning = await self.zk.call(self.zk.pending_reassignment)
        assignments = await self.zk.call(self.zk.topic_assignments)
        assigned = {(t, p): a.topic_id for t, a in assignments.items()
                    for p, replicas in a.partitions.items() if self.broker_id in replicas}
        for tp, rar in reassigning.items():
            if self.broker_id in rar:
                assigned[tp] = assignments[tp[0]].topic_id if tp[0] in assignments else ""
        return assigned

    async def start(self) -> None:
        if not self.cfg["chaoslog.controller.enable"]:
            log.info("controller component disabled (chaoslog.controller.enable=false)")
            return
        self.controller = Controller(self.cfg, self.zk.kazoo, self.broker_id)
        self.controller.startup()

    async def on_new_session(self) -> None:
        """Counted dead meanwhile, this broker was told of no deletion; no
        controller request reaches it between its new start epoch and its
        registration, so what it reads now is what it keeps."""
        self.rm.delete_unassigned(await self.assigned_replicas())

    async def stop(self, clean: bool) -> None:
        if clean and self.cfg["controlled.shutdown.enable"]:
            await self._controlled_shutdown()
        if self.controller is not None:
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.controller.shutdown)
            except Exception:
                log.exception("controller shutdown failed")

    def serves_admin(self) -> bool:
        return self.controller is not None and self.controller.is_active

    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> Future | None:
        if self.controller is None:
            return None
        return self.controller.handle_controlled_shutdown(broker_id, broker_epoch)

    def view(self) -> dict | None:
        """The active controller's view, taken between two controller
        events; on the broker's event loop, so it waits at most 50 ms for a
        running event and says `busy` instead."""
        if self.controller is None or not self.controller.is_active:
            return None
        try:
            return self.controller.snapshot(timeout=0.05)
        except TimeoutError:
            return {"active": True, "busy": True}

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move leadership off this broker before it
        stops (docs/design.md#controlled-shutdown)."""
        retries = self.cfg["controlled.shutdown.max.retries"]
        backoff = self.cfg["controlled.shutdown.retry.backoff.ms"] / 1000
        timeout = self.cfg["controller.socket.timeout.ms"] / 1000
        for attempt in range(1, retries + 1):
            try:
                cid = await self.zk.call(self.zk.controller_id)
                addr = self.cfg.peer_addresses().get(cid)
                if addr is None and cid >= 0:
                    reg = await self.zk.call(self.zk.broker_registration, cid)
                    addr = (reg.host, reg.port) if reg else None
                if addr is None:
                    raise ConnectionError("no controller")
                conn = BrokerConnection(addr[0], addr[1], f"broker-{self.broker_id}", timeout,
                                        self.cfg.security)
                await conn.connect()
                try:
                    frame = control.encode_request(
                        control.ControlledShutdownRequest(self.broker_id, self.start_epoch()),
                        attempt, f"broker-{self.broker_id}")
                    raw = await conn.request_frame(frame)
                finally:
                    conn.close()
                resp = control.decode_response(control.CONTROLLED_SHUTDOWN, raw)
                if resp.error == E.NONE and not resp.partitions_remaining:
                    log.info("controlled shutdown succeeded (attempt %d)", attempt)
                    return
                log.warning("controlled shutdown attempt %d: %s, %d partitions remaining",
                            attempt, E.name(resp.error), len(resp.partitions_remaining))
            except Exception as e:
                log.warning("controlled shutdown attempt %d failed: %r", attempt, e)
            if attempt < retries:
                await asyncio.sleep(backoff)
        log.warning("controlled shutdown failed after %d attempts; shutting down anyway",
                    retries)
