"""Coordination V2: no controller; each partition's leader coordinates its
replicas through ZooKeeper (docs/design.md#v2). Built so far: the
state-change queue and leader election; not yet wired into the broker."""
