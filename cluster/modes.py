"""The coordination modes by name (docs/design.md#coordination-modes): the
one place a mode's name picks its implementation. Apart from
cluster/coordination.py, which both implementations import for the
interface they fulfil."""
from __future__ import annotations

from cluster.config import COORDINATION_MODES
from cluster.coordination import Coordination


def of(name: str) -> Coordination:
    """The mode called `name` (cluster/config.py validates a broker's)."""
    if name == "controller":
        from cluster.controller.coordination import ControllerCoordination
        return ControllerCoordination()
    if name == "v2":
        from cluster.v2.coordination import V2Coordination
        return V2Coordination()
    raise ValueError(f"unknown coordination mode {name!r}: one of {', '.join(COORDINATION_MODES)}")
