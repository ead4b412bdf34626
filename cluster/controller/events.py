"""Controller events (docs/design.md#event-queue). ZooKeeper watches, the
request handler and timers only create these and put them on the
controller's queue; one thread handles them in order.

The original design's eight types are here under its names; the rest are
what Kafka's event-queue controller (KAFKA-5642) also needed."""
from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field

from cluster.protocol import errors as E

from .context import TP


class ControllerEvent:
    """Base class. `needs_active`: only the active controller handles it."""
    needs_active = True

    @property
    def name(self) -> str:
        return type(self).__name__

    def preempt(self) -> None:
        """It will not run (not the active controller, halted, stopping, or
        its handler failed): answer whoever waits for it (Kafka's preempt)."""


# -- the original design's eight ----------------------------------------------
@dataclass
class AddPartition(ControllerEvent):
    """/admin/partitions_add changed (docs/design.md#partitions)."""


@dataclass
class TopicChange(ControllerEvent):
    """/brokers/topics children changed (docs/design.md#topics)."""


@dataclass
class DeleteTopic(ControllerEvent):
    """/admin/delete_topics children changed."""


@dataclass
class BrokerChange(ControllerEvent):
    """/brokers/ids children changed (docs/design.md#broker-failure)."""


@dataclass
class PreferredReplicaElection(ControllerEvent):
    """/admin/preferred_replica_election was created, or `auto` for the
    periodic imbalance check (auto.leader.rebalance.enable)."""
    auto: bool = False


@dataclass
class PartitionReassigned(ControllerEvent):
    """/admin/reassign_partitions changed (KAFKA-42)."""


@dataclass
class ReassignedPartitionIsrChange(ControllerEvent):
    """The leaderAndISR znode of a partition being reassigned changed."""
    tp: TP
    generation: int = 0


@dataclass
class ControlledShutdown(ControllerEvent):
    broker_id: int
    broker_epoch: int
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)

    def preempt(self) -> None:
        if not self.future.done():
            self.future.set_result((E.NOT_CONTROLLER, []))


# -- what Kafka also needed ----------------------------------------------------
@dataclass
class PartitionRemove(ControllerEvent):
    """/admin/partitions_remove changed (docs/design.md#partitions)."""


@dataclass
class IsrChangeNotification(ControllerEvent):
    """A leader changed an ISR and said so under /isr_change_notification (Kafka 0.9)."""


@dataclass
class ReassignmentCheck(ControllerEvent):
    """Periodic wake-up of the reassignment agent (docs/design.md#reassignment),
    in case an ISR watch was missed."""


@dataclass
class StaleEpochResponse(ControllerEvent):
    """A broker said our controller epoch is stale: check ZooKeeper and resign
    if a newer controller exists."""
    broker_id: int = -1


@dataclass
class ControllerChange(ControllerEvent):
    """/controller changed or we (re)connected: elect, or follow the winner.
    Startup is the first one."""
    needs_active = False


@dataclass
class Resync(ControllerEvent):
    """The ZooKeeper connection came back in the same session: kazoo dropped
    our watches, so set them again and look at everything they watch."""


@dataclass
class Reload(ControllerEvent):
    """Handling an event failed half-way: reload everything from ZooKeeper as
    a failover would, keeping our epoch."""


@dataclass
class SessionExpired(ControllerEvent):
    """Our ZooKeeper session is gone: resign (we may be a zombie)."""
    needs_active = False


@dataclass
class Shutdown(ControllerEvent):
    needs_active = False
