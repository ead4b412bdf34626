"""AdminApis: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs
(docs/design.md#admin-api).

A broker serves the admin requests of Kafka's AdminClients by writing the
znodes `chaoslog admin` writes (cluster.admin): the controller watches them
and does the work. As in Kafka, only the active controller accepts the
requests that write; every other broker answers NOT_CONTROLLER and the client
asks the broker its Metadata names as controller. With a timeout the answer
waits until the controller acted (every new partition has a leader in this
broker's metadata, a deleted topic's znode is gone); REQUEST_TIMED_OUT says
the request was taken but is not done yet, as in Kafka.

Topic-level configs are not supported: every topic uses its brokers'
settings, so a CreateTopics naming one is refused with INVALID_CONFIG rather
than creating a topic that silently ignores it. DescribeConfigs shows those
settings under their topic-level names.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable

from kafka.protocol.admin import (CreatePartitionsResponse, CreateTopicsResponse,
                                  DeleteTopicsResponse, DescribeConfigsResponse)
from kazoo.exceptions import NoNodeError

from cluster import admin, zkpaths
from cluster.config import DEFAULTS
from cluster.controller.assignment import AssignmentError
from cluster.coordination import Coordination
from cluster.protocol import errors as E
from cluster.server.metadata_cache import MetadataCache
from contracts.deadline import Deadline, wait_until_async

log = logging.getLogger(__name__)

# DescribeConfigs resource types and config sources (Kafka's numbers).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# Topic-level config name -> the broker setting every topic uses.
TOPIC_CONFIGS = {
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "segment.bytes": "log.segment.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "max.message.bytes": "message.max.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
}

POLL_S = 0.1  # how often a request with a timeout looks whether the controller acted
# How long a command that waits for the brokers (V2) may wait for them.
COMMAND_TIMEOUT_S = 30.0
# More partitions than any test needs: a larger count is refused before
# anything is assigned (found by the protocol fuzzer: a CreatePartitions of
# 2^31-1 partitions kept the ZooKeeper thread busy assigning them).
MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class Refusal:
    error: int
    message: str


def plan_topic(name: str, num_partitions: int, replication_factor: int,
               assignments: dict[int, list[int]], configs: Iterable[str],
               live: list[int], defaults: tuple[int, int]) -> Refusal | dict[int, list[int]] | None:
    """Check one CreatableTopic against the live brokers; the refusal, the
    explicit assignment to write, or None (assign round-robin). -1 for the
    partition count or replication factor means the broker default
    (num.partitions, default.replication.factor), as in Kafka since v4."""
    if not admin.valid_topic_name(name):
        return Refusal(E.INVALID_TOPIC_EXCEPTION,
                       f"illegal topic name {name!r}: use 1-249 of [a-zA-Z0-9._-]")
    configs = sorted(configs)
    if configs:
        return Refusal(E.INVALID_CONFIG, f"topic-level configs are not supported ({', '.join(configs)}): "
                                         f"every topic uses its brokers' settings")
    if assignments:
        if num_partitions != -1 or replication_factor != -1:
            return Refusal(E.INVALID_REQUEST, "give either a replica assignment or a partition "
                                              "count and replication factor, not both")
        if len(assignments) > MAX_PARTITIONS or sorted(assignments) != list(range(len(assignments))):
            return Refusal(E.INVALID_REPLICA_ASSIGNMENT,
                           f"the assignment must cover partitions 0..{len(assignments) - 1}")
        return _check_assignment(assignments, live, first=0)
    partitions = defaults[0] if num_partitions == -1 else num_partitions
    rf = defaults[1] if replication_factor == -1 else replication_factor
    if not 1 <= partitions <= MAX_PARTITIONS:
        return Refusal(E.INVALID_PARTITIONS, f"number of partitions {partitions} must be 1 to "
                                             f"{MAX_PARTITIONS}")
    if rf < 1:
        return Refusal(E.INVALID_REPLICATION_FACTOR, f"replication factor {rf} must be at least 1")
    if rf > len(live):
        return Refusal(E.INVALID_REPLICATION_FACTOR,
                       f"replication factor {rf} larger than the {len(live)} live brokers")
    return None


def _check_assignment(assignments: dict[int, list[int]], live: list[int], first: int
                      ) -> Refusal | dict[int, list[int]]:
    sizes = {len(r) for r in assignments.values()}
    for p, replicas in sorted(assignments.items()):
        if not replicas or len(set(replicas)) != len(replicas):
            return Refusal(E.INVALID_REPLICA_ASSIGNMENT,
                           f"partition {p}: replicas {replicas} must be distinct and non-empty")
        unknown = sorted(set(replicas) - set(live))
        if unknown:
            return Refusal(E.INVALID_REPLICA_ASSIGNMENT,
                           f"partition {p}: brokers {unknown} are not live")
    if len(sizes) != 1:
        return Refusal(E.INVALID_REPLICA_ASSIGNMENT, "all partitions need the same number of replicas")
    return {first + i: list(r) for i, (_p, r) in enumerate(sorted(assignments.items()))}


def plan_partitions(count: int, current: int, replication_factor: int,
                    assignments: list[list[int]] | None, live: list[int]
                    ) -> Refusal | dict[int, list[int]] | None:
    """Check one CreatePartitionsTopic: the refusal, the new partitions'
    explicit replicas, or None (assign round-robin)."""
    if count <= current:
        return Refusal(E.INVALID_PARTITIONS,
                       f"the topic has {current} partitions; the new count {count} must be larger")
    if count > MAX_PARTITIONS:
        return Refusal(E.INVALID_PARTITIONS, f"{count} partitions: at most {MAX_PARTITIONS}")
    if assignments is None:
        if replication_factor > len(live):
            return Refusal(E.INVALID_REPLICATION_FACTOR, f"replication factor {replication_factor} "
                                                         f"larger than the {len(live)} live brokers")
        return None
    if len(assignments) != count - current:
        return Refusal(E.INVALID_REPLICA_ASSIGNMENT,
                       f"{len(assignments)} replica lists for {count - current} new partitions")
    if any(len(r) != replication_factor for r in assignments):
        return Refusal(E.INVALID_REPLICA_ASSIGNMENT,
                       f"each new partition needs {replication_factor} replicas, as the others have")
    return _check_assignment(dict(enumerate(assignments)), live, first=current)


def describe_configs(values: dict[str, Any], keys: list[str] | None, topic_level: bool
                     ) -> list[tuple[str, str, bool, int, bool, list]]:
    """DescribeConfigs entries (name, value, read-only, source, sensitive,
    synonyms) of a broker's settings, under the topic-level names for a
    topic; `keys` None means all."""
    names = TOPIC_CONFIGS if topic_level else {k: k for k in DEFAULTS}
    out = []
    for name, key in sorted(names.items()):
        if keys is not None and name not in keys:
            continue
        v = values[key]
        text = str(v).lower() if isinstance(v, bool) else str(v)
        source = SOURCE_DEFAULT if v == DEFAULTS[key] else SOURCE_STATIC_BROKER
        out.append((name, text, True, source, False, []))
    return out


class AdminApis:
    """Handed the broker's config, its metadata cache, its ZooKeeper client
    (blocking calls run through zk.call), the coordination mode whose admin
    commands it issues, and a way to ask whether this broker serves admin
    requests now (the active controller; in V2 any broker,
    docs/design.md#v2-admin)."""

    def __init__(self, cfg: Any, metadata: MetadataCache, zk: Any,
                 mode: Coordination | None, serves_admin: Callable[[], bool]):
        self.cfg = cfg
        self.broker_id = cfg.broker_id
        self.defaults = (cfg["num.partitions"], cfg["default.replication.factor"])
        self.metadata = metadata
        self.zk = zk
        self.mode = mode
        self.serves_admin = serves_admin

    async def _serve(self, names: list[str], act: Callable[[int], Awaitable[Refusal | None]],
                     timeout_ms: int, done: Callable[[int], Callable[[], bool]] | None,
                     pending: str) -> list[tuple[str, int, str | None]]:
        """The shape every writing request shares: topic i is refused if it
        is named twice or this broker is not the controller, else `act(i)` is
        awaited (a refusal or None). With a timeout and `done`, the answer
        then waits until `done(i)()` holds for every topic acted on, else it
        says REQUEST_TIMED_OUT (`pending`, formatted with the name). Returns
        (name, error, message) per distinct name, in request order."""
        results: dict[str, Refusal] = {}
        acted: list[int] = []
        for i, name in enumerate(names):
            if names.count(name) > 1:
                results[name] = Refusal(E.INVALID_REQUEST, f"topic {name!r} named twice")
            elif self.mode is None or not self.serves_admin():
                results[name] = Refusal(E.NOT_CONTROLLER, "this broker is not the controller")
            elif (refusal := await act(i)) is not None:
                results[name] = refusal
            else:
                acted.append(i)
        if done is not None and timeout_ms > 0:
            deadline = Deadline(timeout_ms / 1000)
            for i in acted:
                if not await wait_until_async(done(i), deadline.remaining(), POLL_S):
                    results[names[i]] = Refusal(E.REQUEST_TIMED_OUT, pending.format(names[i]))
        ok = Refusal(E.NONE, "")
        return [(n, results.get(n, ok).error, results.get(n, ok).message or None)
                for n in dict.fromkeys(names)]

    # -- CreateTopics -----------------------------------------------------------------------

    async def create_topics(self, req: Any, version: int) -> CreateTopicsResponse:
        topics = list(req.topics)
        validate_only = bool(req.validate_only)

        def act(i: int) -> Awaitable[Refusal | None]:
            t = topics[i]
            return self._call(self._create, t.name, t.num_partitions, t.replication_factor,
                              {a.partition_index: list(a.broker_ids) for a in t.assignments},
                              [c.name for c in t.configs], validate_only)

        def led(i: int) -> Callable[[], bool]:
            return lambda: self._has_leaders(topics[i].name)

        out = await self._serve([t.name for t in topics], act, req.timeout_ms,
                                None if validate_only else led,
                                "topic {!r} created; its leaders are not elected yet")
        return CreateTopicsResponse(version=version, throttle_time_ms=0, topics=out)

    def _create(self, name: str, num_partitions: int, replication_factor: int,
                assignments: dict[int, list[int]], configs: list[str], validate_only: bool
                ) -> Refusal | None:
        """On the ZooKeeper thread: check and write one topic."""
        kz = self.zk.kazoo
        plan = plan_topic(name, num_partitions, replication_factor, assignments, configs,
                          admin.live_ids(kz), self.defaults)
        if isinstance(plan, Refusal):
            return plan
        if kz.exists(zkpaths.delete_topic_path(name)):
            return Refusal(E.TOPIC_ALREADY_EXISTS, f"topic {name!r} is marked for deletion")
        if kz.exists(zkpaths.topic_path(name)):
            return Refusal(E.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if validate_only:
            return None
        partitions = self.defaults[0] if num_partitions == -1 else num_partitions
        rf = self.defaults[1] if replication_factor == -1 else replication_factor
        try:
            self.mode.create_topic(kz, name, plan or admin.assign_replicas(
                admin.live_ids(kz), partitions, rf), COMMAND_TIMEOUT_S)
        except (admin.AdminError, AssignmentError) as e:
            exists = kz.exists(zkpaths.topic_path(name)) is not None
            return Refusal(E.TOPIC_ALREADY_EXISTS if exists else E.UNKNOWN_SERVER_ERROR, str(e))
        log.info("CreateTopics: topic %s created", name)
        return None

    def _call(self, fn: Callable, *args: Any) -> Awaitable[Any]:
        """Run blocking `fn`: on the ZooKeeper thread, or on a thread of its
        own where the command waits for the brokers (this one's own part
        needs the ZooKeeper thread)."""
        if self.mode.waits_for_brokers:
            return asyncio.get_running_loop().run_in_executor(None, fn, *args)
        return self.zk.call(fn, *args)

    def _has_leaders(self, topic: str) -> bool:
        parts = self.metadata.partitions_of(topic).values()
        return bool(parts) and all(p.leader >= 0 for p in parts)

    # -- DeleteTopics -----------------------------------------------------------------------

    async def delete_topics(self, req: Any, version: int) -> DeleteTopicsResponse:
        names = list(req.topic_names)

        async def act(i: int) -> Refusal | None:
            if await self._call(self._mark_for_deletion, names[i]):
                return None
            return Refusal(E.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {names[i]!r}")

        out = await self._serve(names, act, req.timeout_ms,
                                lambda i: lambda: not self.metadata.has_topic(names[i]),
                                "topic {!r} marked for deletion; not deleted yet")
        return DeleteTopicsResponse(version=version, throttle_time_ms=0,
                                    responses=[(name, err) for name, err, _msg in out])

    def _mark_for_deletion(self, name: str) -> bool:
        kz = self.zk.kazoo
        if kz.exists(zkpaths.topic_path(name)) is None:
            return False
        try:
            down = self.mode.delete_topic(kz, name, COMMAND_TIMEOUT_S)
        except admin.AdminError as e:
            log.warning("DeleteTopics: %s", e)
            return True          # asked; the client's timeout says it is not done
        log.info("DeleteTopics: topic %s deleted or marked for deletion%s", name,
                 f"; brokers {down} act on it when back" if down else "")
        return True

    # -- CreatePartitions -------------------------------------------------------------------

    async def create_partitions(self, req: Any, version: int) -> CreatePartitionsResponse:
        topics = list(req.topics)
        validate_only = bool(req.validate_only)

        def act(i: int) -> Awaitable[Refusal | None]:
            t = topics[i]
            assignments = (None if t.assignments is None
                           else [list(a.broker_ids) for a in t.assignments])
            return self._call(self._add_partitions, t.name, t.count, assignments, validate_only)

        def grown(i: int) -> Callable[[], bool]:
            def check() -> bool:
                parts = self.metadata.partitions_of(topics[i].name).values()
                return len(parts) >= topics[i].count and all(p.leader >= 0 for p in parts)
            return check

        out = await self._serve([t.name for t in topics], act, req.timeout_ms,
                                None if validate_only else grown,
                                "partitions of {!r} requested; not all led yet")
        return CreatePartitionsResponse(version=version, throttle_time_ms=0, results=out)

    def _add_partitions(self, name: str, count: int, assignments: list[list[int]] | None,
                        validate_only: bool) -> Refusal | None:
        kz = self.zk.kazoo
        try:
            data, _ = kz.get(zkpaths.topic_path(name))
        except NoNodeError:
            return Refusal(E.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        if kz.exists(zkpaths.delete_topic_path(name)):
            return Refusal(E.INVALID_TOPIC_EXCEPTION, f"topic {name!r} is marked for deletion")
        current = zkpaths.TopicAssignment.decode(data).partitions
        if any(tp[0] == name for tp in self.zk.pending_reassignment()):
            return Refusal(E.REASSIGNMENT_IN_PROGRESS, f"a reassignment of {name!r} is in progress")
        rf = len(next(iter(current.values())))
        plan = plan_partitions(count, len(current), rf, assignments, admin.live_ids(kz))
        if isinstance(plan, Refusal) or validate_only:
            return plan if isinstance(plan, Refusal) else None
        try:
            self.mode.add_partitions(kz, name, admin.plan_new_partitions(kz, name, count, plan),
                                     COMMAND_TIMEOUT_S)
        except admin.AdminError as e:
            return Refusal(E.INVALID_PARTITIONS, str(e))
        log.info("CreatePartitions: topic %s grows to %d partitions", name, count)
        return None

    # -- DescribeConfigs --------------------------------------------------------------------

    async def describe_configs(self, req: Any, version: int) -> DescribeConfigsResponse:
        results = []
        for r in req.resources:
            keys = None if r.configuration_keys is None else list(r.configuration_keys)
            err, msg, entries = E.NONE, None, []
            if r.resource_type == RESOURCE_TOPIC:
                if self.metadata.has_topic(r.resource_name):
                    entries = describe_configs(self.cfg.values, keys, topic_level=True)
                else:
                    err, msg = E.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {r.resource_name!r}"
            elif r.resource_type == RESOURCE_BROKER:
                if r.resource_name in ("", str(self.broker_id)):
                    entries = describe_configs(self.cfg.values, keys, topic_level=False)
                else:
                    err, msg = E.INVALID_REQUEST, (f"broker {r.resource_name} describes its own "
                                                   f"configs: this is broker {self.broker_id}")
            else:
                err, msg = E.INVALID_REQUEST, f"resource type {r.resource_type} is not supported"
            results.append((err, msg, r.resource_type, r.resource_name, entries))
        return DescribeConfigsResponse(version=version, throttle_time_ms=0, results=results)
