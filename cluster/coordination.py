"""The coordination mode, chosen once (docs/design.md#coordination-modes).

Two designs coordinate the brokers. `controller`: one broker, elected
through ZooKeeper, drives leaders, ISR and admin work. `v2`: no controller;
each partition's leader coordinates it, and admin commands tell the brokers
themselves through their state-change queues (docs/design.md#v2). The data
plane is the same in both.

What differs is `Coordination`: the admin commands (as `chaoslog admin`, a
broker's admin requests and the admin faults issue them) and the part a
broker runs besides its replicas (`Component`). cluster/modes.py's
`of(name)` is the one place a mode's name picks its implementation
(cluster/controller/coordination.py, cluster/v2/coordination.py); everyone
else asks the object.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable, Protocol

TP = tuple[str, int]


class AdminError(Exception):
    """An admin command that cannot be done; the message is one line for the
    user (cluster.admin, which also raises it, says it to the CLI's user)."""


class Component(Protocol):
    """What a broker runs besides its replicas: the controller component, or
    V2's coordinator."""

    async def assigned_replicas(self) -> dict[TP, str] | None:
        """The partitions assigned here with their topic ids, read before
        the replicas load (a replica not among them is deleted); None: keep
        every replica found (V2 deletes only on a close-replica)."""

    async def start(self) -> None:
        """Start, before the broker registers."""

    async def on_new_session(self) -> None:
        """The broker's ZooKeeper session expired and a new one began, before
        it registers again."""

    async def stop(self, clean: bool) -> None:
        """Stop; `clean`: the broker stops by request and may first move its
        leaderships away (docs/design.md#controlled-shutdown)."""

    def serves_admin(self) -> bool:
        """Whether this broker takes the admin requests that write now."""

    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> Future | None:
        """A broker's ControlledShutdown request, or None: not the controller."""

    def view(self) -> dict | None:
        """What the state window shows of it (None: nothing to show)."""


class Coordination(Protocol):
    """A coordination mode. Admin commands are blocking kazoo calls; each
    returns once its request is taken (wait for its effect apart: e.g.
    cluster.admin.wait_for_leaders) and raises AdminError."""

    name: str
    # A controller elected among the brokers: admin requests go to it, a
    # leader announces ISR changes to it, a topic deleted and created again
    # gets a new id from it (V2 refuses the re-creation).
    has_controller: bool
    # An admin command waits for the brokers (the serving one among them) to
    # take their part: a broker runs it on a thread of its own, never on the
    # thread its own ZooKeeper events need.
    waits_for_brokers: bool

    def create_topic(self, zk: Any, topic: str, assignment: dict[int, list[int]],
                     timeout_s: float) -> None: ...

    def delete_topic(self, zk: Any, topic: str, timeout_s: float) -> list[int]:
        """The brokers that were down and act on the deletion when back."""

    def add_partitions(self, zk: Any, topic: str, new: dict[int, list[int]],
                       timeout_s: float) -> None: ...

    def remove_partitions(self, zk: Any, topic: str, partitions: list[int],
                          timeout_s: float) -> list[int]:
        """The brokers that were down and act on the removal when back."""

    def start_reassignment(self, zk: Any, plan: dict[TP, list[int]]) -> None: ...

    def reassigning(self, zk: Any, tps: set[TP]) -> set[TP]:
        """Those of `tps` whose reassignment is not done yet."""

    def elect_preferred(self, zk: Any, tps: list[TP], timeout_s: float) -> list[TP]:
        """Ask for the preferred replicas of `tps` to lead, and where the
        asker must end the request, wait up to `timeout_s` and end it.
        Returns those known not done."""

    # The same in steps, for an asker that waits on its own (the admin faults).
    def ask_preferred(self, zk: Any, tps: list[TP]) -> None:
        """Ask for the preferred replicas of `tps` to lead."""

    def preferred_pending(self, zk: Any, tps: list[TP]) -> list[TP]:
        """Those of `tps` the election asked for is not done with."""

    def end_preferred(self, zk: Any) -> None:
        """The election asked for is done (or given up): remove the request
        where the mode's asker removes it."""

    def component(self, cfg: Any, zk: Any, rm: Any, metadata: Any,
                  start_epoch: Callable[[], int]) -> Component: ...
