"""A follower told of a new leader epoch truncates again, even under the same leader.

A regression test for a bug the pressure suite found (seed 219 of
bench/results/pressure-2026-11-25-b.json): broker 3 followed broker 1 in
epoch 4 and held epoch-4 records broker 1 had not committed; cut off, it
missed epoch 5 (broker 2 led and wrote other records at those offsets,
broker 1 truncated to them as its follower); epoch 6 made broker 1 leader
again. Broker 3 saw "the same leader" and kept fetching from its LEO: it
never truncated its epoch-4 tail, and the replicas disagreed for good
(docs/design.md#leader-and-isr).
"""
from __future__ import annotations

import asyncio

import pytest

from cluster.config import BrokerConfig
from cluster.log import LogConfig, LogManager
from cluster.protocol import control
from cluster.protocol import errors as E
from cluster.server.metadata_cache import MetadataCache
from cluster.server.replica_manager import ReplicaManager

TP = ("t", 0)


def _broker(tmp_path, truncation: str) -> ReplicaManager:
    cfg = BrokerConfig.from_dict({"broker.id": 3, "log.dirs": str(tmp_path),
                                  "replication.truncation": truncation})
    return ReplicaManager(cfg, LogManager(tmp_path, LogConfig.from_broker_config(cfg)), None,
                          MetadataCache(3, cfg.advertised), 1)


def _follow(rm: ReplicaManager, leader: int, leader_epoch: int) -> None:
    state = control.PartitionState(TP[0], TP[1], leader, leader_epoch, (1, 2, 3), 0, (1, 2, 3))
    resp = rm.handle_leader_and_isr(control.LeaderAndIsrRequest(2, 5, False, (state,)))
    assert resp.error == E.NONE and resp.partitions[0].error == E.NONE


def _fetch_state(rm: ReplicaManager):
    return rm.fetchers.fetchers[rm.fetchers.source_of(TP)].partitions[TP]


@pytest.mark.parametrize("truncation, truncates_again", [("leader-epoch", True), ("hw", False)])
def test_a_new_epoch_of_the_same_leader(tmp_path, truncation, truncates_again):
    async def run():
        rm = _broker(tmp_path, truncation)
        try:
            _follow(rm, leader=1, leader_epoch=4)
            assert rm.fetchers.source_of(TP) == 1
            _fetch_state(rm).truncating = False  # as if the first truncation had finished
            _follow(rm, leader=1, leader_epoch=6)  # epoch 5 (another leader) went unseen
            assert rm.fetchers.source_of(TP) == 1
            assert _fetch_state(rm).truncating is truncates_again
        finally:
            await rm.fetchers.shutdown()
    asyncio.run(run())
