"""Coordination V2: no controller; each partition's leader coordinates its
replicas through ZooKeeper (docs/design.md#v2). Built so far: the
state-change queue, leader election and the broker component; the admin
commands are not built yet."""
