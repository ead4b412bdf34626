"""What a ReplicaFetcher reads of its ReplicaManager, for tests without processes."""
from __future__ import annotations


class ReplicaManagerStub:
    """The broker's config and its partitions by (topic, partition): all a fetcher asks its owner."""

    def __init__(self, cfg, partitions=None):
        self.cfg = cfg
        self.partitions = partitions if partitions is not None else {}
