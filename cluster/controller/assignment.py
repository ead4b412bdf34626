"""Replica assignment for new topics and partitions, as Kafka's
AdminUtils.assignReplicasToBrokers (no racks): the first replica of partition
p goes to broker (p + start) mod n, so preferred replicas (and hence leaders)
spread round-robin; the followers are shifted by an amount that grows every n
partitions so that the followers of one broker's partitions spread too."""
from __future__ import annotations

import random
from typing import Sequence


class AssignmentError(ValueError):
    pass


def assign_replicas(brokers: Sequence[int], partitions: int, replication_factor: int, *,
                    start_index: int = -1, start_partition: int = 0,
                    replica_shift: int = -1, rng: random.Random | None = None
                    ) -> dict[int, list[int]]:
    """partition id -> replica list for `partitions` partitions numbered from
    start_partition. start_index / replica_shift < 0 mean random (Kafka)."""
    ids = sorted(set(brokers))
    n = len(ids)
    if partitions <= 0:
        raise AssignmentError("number of partitions must be at least 1")
    if replication_factor <= 0:
        raise AssignmentError("replication factor must be at least 1")
    if replication_factor > n:
        raise AssignmentError(f"replication factor {replication_factor} larger than "
                              f"the {n} available brokers")
    rng = rng or random.Random()
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = replica_shift if replica_shift >= 0 else rng.randrange(n)
    out: dict[int, list[int]] = {}
    for pid in range(start_partition, start_partition + partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            # distance 1..n-1 from the first replica, never 0: no duplicates
            step = 1 + (shift + j) % (n - 1)
            replicas.append(ids[(first + step) % n])
        out[pid] = replicas
    return out
