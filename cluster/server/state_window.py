"""The test-only window into a broker (docs/architecture.md, "State window").

Oracles of the harness check the design's definitions at every sample of a
run, not only at its end: every ISR member holds every committed record, a
leader's HW never goes back, replicas agree below the HW. ZooKeeper shows
some of that; the rest lives in the brokers' memory. With
`chaoslog.state.window.enable` (a harness hook, off by default) a broker
answers one request of its own on its client port:

  request  = Kafka request header v1 with api key STATE_WINDOW_KEY, version 0,
             then int32 max_partitions (<= 0: the broker's cap)
  response = int32 correlation id, int16 error, int32 length + UTF-8 JSON:
             {"broker", "start_epoch", "partitions": [Partition.view(), ...],
              "truncated": bool, "controller": {...} while this broker is the
              active controller (its context, the controller's view)}

The answer is built at once on the event loop, so it is one consistent
moment of this broker; its cost is bounded: at most the cap of partitions
(`chaoslog.state.window.max.partitions`), each from memory plus one batch
header. With the hook off the key is unknown and the connection closes, as
for any unsupported request.
"""
from __future__ import annotations

import json
import struct
from typing import Any, Callable

from cluster.protocol import errors as E

STATE_WINDOW_KEY = 32001   # outside Kafka's api keys
STATE_WINDOW_VERSION = 0
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


class StateWindow:
    """Handed this broker's id and incarnation, the replica manager's
    partitions (a getter), the active controller's view (a getter: None
    when this broker is not the active controller) and the cap."""

    def __init__(self, broker_id: int, start_epoch: Callable[[], int],
                 partitions: Callable[[], dict], controller_view: Callable[[], Any],
                 max_partitions: int):
        self.broker_id = broker_id
        self.start_epoch = start_epoch
        self.partitions = partitions
        self.controller_view = controller_view
        self.max_partitions = max_partitions

    def snapshot(self, limit: int = 0) -> dict[str, Any]:
        cap = self.max_partitions if limit <= 0 else min(limit, self.max_partitions)
        parts = sorted(self.partitions().items())
        out: dict[str, Any] = {"broker": self.broker_id, "start_epoch": self.start_epoch(),
                               "partitions": [p.view() for _tp, p in parts[:cap]],
                               "truncated": len(parts) > cap}
        controller = self.controller_view()
        if controller is not None:
            held = controller.get("partitions", [])
            out["controller"] = {**controller, "partitions": held[:cap],
                                 "truncated": len(held) > cap}
        return out

    def handle(self, correlation_id: int, body: bytes) -> bytes:
        """The framed response to one request body (a body too short asks
        for the cap)."""
        limit = _I32.unpack_from(body)[0] if len(body) >= 4 else 0
        try:
            data = json.dumps(self.snapshot(limit), separators=(",", ":")).encode()
            err = E.NONE
        except Exception:  # noqa: BLE001 - the window must never take the broker down
            data, err = b"{}", E.UNKNOWN_SERVER_ERROR
        payload = _I32.pack(correlation_id) + _I16.pack(err) + _I32.pack(len(data)) + data
        return _I32.pack(len(payload)) + payload
