"""What a ReplicaFetcher is handed, for tests without processes."""
from __future__ import annotations


def partitions_of(partitions=None):
    """A partition lookup over a dict of (topic, partition) -> Partition."""
    parts = partitions if partitions is not None else {}
    return parts.get
