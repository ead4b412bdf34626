"""Coordination V2: no controller; each partition's leader coordinates its
replicas through ZooKeeper (docs/design.md#v2). Built so far: the
state-change queue, leader election, the broker component, and the create
and delete admin commands."""
