"""The lowest layer: what the other layers agree on and nobody owns.

`abilities` holds small typing.Protocol classes, one per thing a cluster may
offer the fault injectors (kill and restart nodes, pause them, cut their
network, degrade proxied links, reach their ZooKeeper, their files, their
Kafka metadata); every cluster declares which it implements and every
injector which it needs. `deadline` is the one helper for waiting on a
condition. This package imports nothing of the project, and every layer may
import it (docs/architecture.md, "Layers").
"""
