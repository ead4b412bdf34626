"""The V2 mode (cluster/coordination.py): admin commands tell the brokers
themselves through their state-change queues (cluster/v2/admin.py), and each
broker runs V2's coordinator instead of a controller (docs/design.md#v2).
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable

from cluster.coordination import AdminError
from cluster.v2 import admin as v2admin
from cluster.v2.coordinator import Coordinator

TP = tuple[str, int]


def _one_line(fn: Callable, *args: Any) -> Any:
    """`fn(*args)`, its V2AdminError as the AdminError every caller knows."""
    try:
        return fn(*args)
    except v2admin.V2AdminError as e:
        raise AdminError(str(e)) from None


class V2Coordination:
    name = "v2"
    has_controller = False
    waits_for_brokers = True     # a command waits until the replicas took their requests

    def create_topic(self, zk: Any, topic: str, assignment: dict[int, list[int]],
                     timeout_s: float) -> None:
        _one_line(v2admin.create_topic, zk, topic, assignment, timeout_s)

    def delete_topic(self, zk: Any, topic: str, timeout_s: float) -> list[int]:
        return _one_line(v2admin.delete_topic, zk, topic, timeout_s)

    def add_partitions(self, zk: Any, topic: str, new: dict[int, list[int]],
                       timeout_s: float) -> None:
        _one_line(v2admin.add_partitions, zk, topic, new, timeout_s)

    def remove_partitions(self, zk: Any, topic: str, partitions: list[int],
                          timeout_s: float) -> list[int]:
        return _one_line(v2admin.remove_partitions, zk, topic, partitions, timeout_s)

    def start_reassignment(self, zk: Any, plan: dict[TP, list[int]]) -> None:
        _one_line(v2admin.reassign, zk, plan, 0.0)

    def reassigning(self, zk: Any, tps: set[TP]) -> set[TP]:
        return {tp for tp in tps if v2admin.still_moving(zk, *tp)}

    def elect_preferred(self, zk: Any, tps: list[TP], timeout_s: float) -> list[TP]:
        return v2admin.preferred_election(zk, tps, timeout_s)

    def ask_preferred(self, zk: Any, tps: list[TP]) -> None:
        v2admin.ask_preferred(zk, tps)

    def preferred_pending(self, zk: Any, tps: list[TP]) -> list[TP]:
        return v2admin.preferred_pending(zk, tps)

    def end_preferred(self, zk: Any) -> None:
        """The leaders resign while the request is there: the asker removes it."""
        v2admin.end_preferred(zk)

    def component(self, cfg: Any, zk: Any, rm: Any, metadata: Any,
                  start_epoch: Callable[[], int]) -> "V2Component":
        return V2Component(Coordinator(cfg, zk, rm, metadata))


class V2Component:
    """V2's coordinator as a broker's component: it starts the replicas
    assigned here before the broker registers, and no broker is a
    controller (any broker serves the admin requests, docs/design.md#v2-admin)."""

    def __init__(self, coordinator: Coordinator):
        self.coordinator = coordinator

    async def assigned_replicas(self) -> None:
        """None: V2 deletes a replica only on a close-replica of its queue
        (docs/design.md#v2-broker)."""
        return None

    async def start(self) -> None:
        await self.coordinator.start()

    async def on_new_session(self) -> None:
        self.coordinator.on_new_session()

    async def stop(self, clean: bool) -> None:
        """No controlled shutdown: the leader locks go with the session."""
        await self.coordinator.shutdown()

    def serves_admin(self) -> bool:
        return True

    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> Future | None:
        return None

    def view(self) -> dict | None:
        return None
