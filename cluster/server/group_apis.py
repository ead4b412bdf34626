"""GroupApis: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, ListGroups, DescribeGroups (docs/design.md#groups).

Requests in, GroupCoordinator calls, responses out at the version asked.
FindCoordinator (kafka_apis.py) names the leader of the group's partition
of the offsets topic, `topic`, which creates it on first use
(internal_topic.py).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from kafka.protocol.admin import DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer import (HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse,
                                     OffsetCommitResponse, OffsetFetchResponse,
                                     SyncGroupResponse)
from kafka.protocol.producer import TxnOffsetCommitResponse

from cluster.protocol import errors as E
from cluster.protocol.frame import RequestHeader
from cluster.server.group_coordinator import GroupConfig, GroupCoordinator
from cluster.server.group_metadata import OffsetAndMetadata
from cluster.server.group_metadata_manager import GroupMetadataManager
from cluster.server.internal_topic import InternalTopic
from cluster.server.metadata_cache import MetadataCache
from cluster.server.offsets_topic import GROUP_METADATA_TOPIC

log = logging.getLogger(__name__)

def _answer(fut: asyncio.Future) -> Callable[..., None]:
    """A coordinator callback that completes `fut` with its arguments (a
    request whose connection is gone has cancelled it: then nothing)."""
    def answer(*args: Any) -> None:
        if not fut.done():
            fut.set_result(args)
    return answer


def _by_topic(results: dict[tuple[str, int], Any]) -> dict[str, list[tuple[int, Any]]]:
    out: dict[str, list[tuple[int, Any]]] = {}
    for (topic, partition), value in results.items():
        out.setdefault(topic, []).append((partition, value))
    return out


class GroupApis:
    """Handed the broker's config, its replica manager (the offsets
    partitions), its metadata cache (who leads them, which topics exist)
    and its ZooKeeper client (to create the offsets topic)."""

    def __init__(self, cfg: Any, rm: Any, metadata: MetadataCache, zk: Any):
        self.metadata = metadata
        self.topic = InternalTopic(GROUP_METADATA_TOPIC, cfg["offsets.topic.num.partitions"],
                                   cfg["offsets.topic.replication.factor"], metadata, zk)
        manager = GroupMetadataManager(rm.partition, self.topic.partition_count, rm.min_isr,
                                       cfg["message.max.bytes"], cfg["offsets.commit.timeout.ms"],
                                       cfg["offset.metadata.max.bytes"])
        self.coordinator = GroupCoordinator(manager, GroupConfig.from_broker_config(cfg))

    # -- membership -----------------------------------------------------------------------------

    async def join_group(self, hdr: RequestHeader, req: Any) -> JoinGroupResponse:
        v = hdr.api_version
        fut = asyncio.get_running_loop().create_future()
        self.coordinator.handle_join_group(
            req.group_id, req.member_id or "", hdr.client_id or "", "",
            req.rebalance_timeout_ms if v >= 1 else req.session_timeout_ms,
            req.session_timeout_ms, req.protocol_type or "",
            [(p.name or "", bytes(p.metadata or b"")) for p in req.protocols or []],
            _answer(fut))
        ((err, generation, protocol, leader, member_id, members),) = await fut
        kw: dict[str, Any] = dict(error_code=err, generation_id=generation,
                                  protocol_name=protocol, leader=leader, member_id=member_id,
                                  members=members)
        if v >= 2:
            kw["throttle_time_ms"] = 0
        return JoinGroupResponse(version=v, **kw)

    async def sync_group(self, hdr: RequestHeader, req: Any) -> SyncGroupResponse:
        fut = asyncio.get_running_loop().create_future()
        assignments = {a.member_id: bytes(a.assignment or b"") for a in req.assignments or []}
        self.coordinator.handle_sync_group(req.group_id, req.generation_id, req.member_id or "",
                                           assignments, _answer(fut))
        err, assignment = await fut
        return self._with_throttle(SyncGroupResponse, hdr.api_version, 1,
                                   error_code=err, assignment=assignment)

    async def heartbeat(self, hdr: RequestHeader, req: Any) -> HeartbeatResponse:
        err = self.coordinator.handle_heartbeat(req.group_id, req.member_id or "",
                                                req.generation_id)
        return self._with_throttle(HeartbeatResponse, hdr.api_version, 1, error_code=err)

    async def leave_group(self, hdr: RequestHeader, req: Any) -> LeaveGroupResponse:
        err = self.coordinator.handle_leave_group(req.group_id, req.member_id or "")
        return self._with_throttle(LeaveGroupResponse, hdr.api_version, 1, error_code=err)

    @staticmethod
    def _with_throttle(cls: type, version: int, since: int, **fields: Any) -> Any:
        """A response with throttle_time_ms 0 from version `since` on."""
        if version >= since:
            fields["throttle_time_ms"] = 0
        return cls(version=version, **fields)

    # -- offsets --------------------------------------------------------------------------------

    def _offsets_of(self, req: Any) -> tuple[dict[tuple[str, int], int],
                                             dict[tuple[str, int], OffsetAndMetadata]]:
        """An OffsetCommit's or TxnOffsetCommit's partitions: an error per
        partition in the request's order (UNKNOWN_TOPIC_OR_PARTITION for one
        the metadata does not have), and the offsets of the others."""
        results: dict[tuple[str, int], int] = {}
        offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        for t in req.topics or []:
            for pt in t.partitions or []:
                tp = (t.name, pt.partition_index)
                if self.metadata.partition(*tp) is None:
                    results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                    offsets.pop(tp, None)
                else:
                    results[tp] = E.NONE   # keeps the request's order
                    offsets[tp] = OffsetAndMetadata(pt.committed_offset,
                                                    pt.committed_metadata or "")
        return results, offsets

    async def offset_commit(self, hdr: RequestHeader, req: Any) -> OffsetCommitResponse:
        """v1-4. v1's per-partition commit timestamp is not used: Kafka 2.0
        stamps commits with its own clock too (that field only moved its
        expiry, and committed offsets do not expire here)."""
        results, offsets = self._offsets_of(req)
        if offsets:
            fut = asyncio.get_running_loop().create_future()
            self.coordinator.handle_commit_offsets(req.group_id, req.member_id or "",
                                                   req.generation_id_or_member_epoch, offsets,
                                                   _answer(fut))
            (committed,) = await fut
            results.update(committed)
        topics = [(name, parts) for name, parts in _by_topic(results).items()]
        return self._with_throttle(OffsetCommitResponse, hdr.api_version, 3, topics=topics)

    async def txn_offset_commit(self, hdr: RequestHeader, req: Any) -> TxnOffsetCommitResponse:
        """v0-1: offsets committed in the producer's transaction."""
        results, offsets = self._offsets_of(req)
        if offsets:
            fut = asyncio.get_running_loop().create_future()
            self.coordinator.handle_txn_commit_offsets(req.group_id, req.producer_id,
                                                       req.producer_epoch, offsets, _answer(fut))
            (committed,) = await fut
            results.update(committed)
        return TxnOffsetCommitResponse(version=hdr.api_version, throttle_time_ms=0,
                                       topics=list(_by_topic(results).items()))

    async def offset_fetch(self, hdr: RequestHeader, req: Any) -> OffsetFetchResponse:
        """v1-4: the listed partitions, or (v2+, topics null) all the group has."""
        v = hdr.api_version
        partitions = (None if req.topics is None and v >= 2 else
                      [(t.name, p) for t in req.topics or [] for p in t.partition_indexes or []])
        err, offsets = self.coordinator.handle_fetch_offsets(req.group_id, partitions)
        if err != E.NONE:
            # v2+ say it once; v1 has only the partitions to say it in.
            found = {} if v >= 2 else {tp: (-1, "", err) for tp in partitions or []}
        else:
            found = {tp: (-1, "", E.NONE) if om is None else (om.offset, om.metadata, E.NONE)
                     for tp, om in offsets.items()}
        topics = [(name, [(p, off, md, e) for p, (off, md, e) in parts])
                  for name, parts in _by_topic(found).items()]
        fields: dict[str, Any] = {"topics": topics}
        if v >= 2:
            fields["error_code"] = err
        return self._with_throttle(OffsetFetchResponse, v, 3, **fields)

    # -- ListGroups, DescribeGroups ----------------------------------------------------------------

    async def list_groups(self, hdr: RequestHeader, req: Any) -> ListGroupsResponse:
        err, groups = self.coordinator.handle_list_groups()
        return self._with_throttle(ListGroupsResponse, hdr.api_version, 1, error_code=err,
                                   groups=groups)

    async def describe_groups(self, hdr: RequestHeader, req: Any) -> DescribeGroupsResponse:
        groups = []
        for group_id in req.groups or []:
            err, (state, protocol_type, protocol, members) = \
                self.coordinator.handle_describe_group(group_id)
            groups.append((err, group_id, state, protocol_type, protocol, members))
        return self._with_throttle(DescribeGroupsResponse, hdr.api_version, 1, groups=groups)
