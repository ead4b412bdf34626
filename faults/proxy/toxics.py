"""Toxics: what the API stores about a toxic, and the stage that runs it on one link.

Toxiproxy keeps one *toxic chain* per direction of a proxy and, for every
proxied connection, instantiates that chain on the connection's link (see
``link.py``).  We do the same: a :class:`ToxicSpec` is the API object (name,
type, stream, toxicity, attributes) and a :class:`Stage` is its per-link
instance, a small asyncio task between two queues.

Why stages hold their data in ``held`` instead of local variables: a toxic can
be removed or updated while bytes are inside it.  Stages only ever suspend on
``queue.get()`` or ``asyncio.sleep()``, emit with ``put_nowait`` and keep
every chunk they have taken but not yet passed on in ``held``.  So the link can
cancel a stage *synchronously* (no ``await``) and forward ``held`` plus the
stage's queued input in order: nothing is lost or reordered, which is what
Toxiproxy achieves with its interrupt channels.

Toxicity is rolled when a stage starts: when a connection is created, when
a toxic is added to a live connection, and again when a toxic is updated
(Toxiproxy re-runs the stub on update, with a fresh roll).
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

STREAMS = ("upstream", "downstream")


@dataclass(frozen=True)
class Chunk:
    """Bytes read from a socket, stamped with the loop time they arrived.

    Latency is measured from the stamp (as Toxiproxy does), so a chunk that
    waited behind another one is not delayed twice.
    """

    data: bytes
    stamp: float


EOF = None  # on a stage queue: the source closed, or a toxic closed the stream


class ToxicError(ValueError):
    """A toxic request the API must refuse; carries the HTTP status."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------- API objects

# Attribute names and defaults per toxic type: Toxiproxy answers with every
# attribute of the type, defaults included, so we do too.
ATTRIBUTES: dict[str, dict[str, int]] = {
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
}


def merge_attributes(kind: str, given: Any, base: dict[str, int]) -> dict[str, int]:
    """``base`` updated with the known keys of ``given``, validated.

    Unknown keys are ignored (Go's decoder does the same); values must be
    non-negative integers (Go refuses strings and fractions for int64 fields;
    we also refuse negative values, which no toxic can honour).
    """
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ToxicError("bad request body: attributes must be an object")
    attrs = dict(base)
    for key in ATTRIBUTES[kind]:
        if key not in given or given[key] is None:
            continue
        value = given[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ToxicError(f"bad request body: attribute {key} must be an integer")
        if isinstance(value, float):
            if not value.is_integer():
                raise ToxicError(f"bad request body: attribute {key} must be an integer")
            value = int(value)
        if value < 0:
            raise ToxicError(f"bad request body: attribute {key} must not be negative")
        attrs[key] = value
    _check_consistency(kind, attrs)
    return attrs


def _check_consistency(kind: str, attrs: dict[str, int]) -> None:
    """Refuse attribute sets a stage could not run (would spin or divide by 0)."""
    if kind == "bandwidth" and attrs["rate"] <= 0:
        raise ToxicError("bad request body: bandwidth rate must be positive")
    if kind == "slicer":
        if attrs["average_size"] <= 0:
            raise ToxicError("bad request body: slicer average_size must be positive")
        if attrs["size_variation"] >= attrs["average_size"]:
            raise ToxicError(
                "bad request body: slicer size_variation must be smaller than average_size"
            )


def parse_toxicity(value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToxicError("bad request body: toxicity must be a number")
    if not 0.0 <= value <= 1.0:
        raise ToxicError("bad request body: toxicity must be between 0 and 1")
    return float(value)


@dataclass
class ToxicSpec:
    """A toxic as the API sees it; shared by every link of the proxy."""

    name: str
    type: str
    stream: str
    toxicity: float = 1.0
    attributes: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_request(cls, body: Any) -> "ToxicSpec":
        """Build from a ``POST /proxies/{p}/toxics`` body, checking in Toxiproxy's order."""
        if not isinstance(body, dict):
            raise ToxicError("bad request body: expected a JSON object")
        for key in ("name", "type", "stream"):
            if body.get(key) is not None and not isinstance(body[key], str):
                raise ToxicError(f"bad request body: {key} must be a string")
        stream = body.get("stream")
        stream = "downstream" if stream is None else stream.lower()
        if stream not in STREAMS:
            raise ToxicError("stream was invalid, can be either upstream or downstream")
        kind = body.get("type") or ""
        name = body.get("name") or f"{kind}_{stream}"
        if kind not in ATTRIBUTES:
            raise ToxicError("invalid toxic type")
        toxicity = parse_toxicity(body.get("toxicity"), 1.0)
        attrs = merge_attributes(kind, body.get("attributes"), ATTRIBUTES[kind])
        return cls(name=name, type=kind, stream=stream, toxicity=toxicity, attributes=attrs)

    def updated(self, body: Any) -> "ToxicSpec":
        """A copy with the attributes/toxicity of an update body merged in."""
        if not isinstance(body, dict):
            raise ToxicError("bad request body: expected a JSON object")
        return ToxicSpec(
            name=self.name,
            type=self.type,
            stream=self.stream,
            toxicity=parse_toxicity(body.get("toxicity"), self.toxicity),
            attributes=merge_attributes(self.type, body.get("attributes"), self.attributes),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
        }


# ---------------------------------------------------------------- link stages


class LinkHandle(Protocol):
    """What a stage may ask of the link it runs on (link.Link provides it)."""

    def release(self, size: int) -> None:
        """`size` bytes have left the chain: let the reader take more."""

    def reset_connection(self) -> None:
        """Drop the whole connection with a TCP RST to both peers."""


class Stage:
    """One toxic running on one link: reads ``input``, writes ``output``.

    Subclasses override :meth:`process` (must consume ``held[0]`` with
    :meth:`emit_front`, :meth:`drop_front` or :meth:`close_stream`),
    :meth:`at_eof` (runs before EOF is passed on) and :meth:`begin`.
    An inactive stage (lost the toxicity roll) passes everything through.
    """

    def __init__(self, spec: ToxicSpec, link: "LinkHandle"):
        self.spec = spec
        self.link = link
        self.input: asyncio.Queue = asyncio.Queue()
        self.output: asyncio.Queue | None = None  # wired by the link
        self.held: deque = deque()
        self.task: asyncio.Task | None = None
        self.active = False
        self.done = False  # EOF passed on: nothing more will come out
        self._timers: list[asyncio.TimerHandle] = []

    @property
    def attrs(self) -> dict[str, int]:
        return self.spec.attributes

    # -- lifecycle, driven by the link (all synchronous)

    def start(self) -> None:
        self.active = random.random() < self.spec.toxicity
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> list:
        """Cancel the stage now; return what it held, oldest first."""
        self._cancel_timers()
        if self.task is not None:
            self.task.cancel()
        held = list(self.held)
        self.held.clear()
        return held

    def restart(self, spec: ToxicSpec) -> None:
        """Apply new attributes: held data is processed again with them."""
        if self.done:
            self.spec = spec
            return
        self._cancel_timers()
        if self.task is not None:
            self.task.cancel()
        self.spec = spec
        self.start()

    def on_remove(self) -> None:
        """Hook before the link splices the stage out (see TimeoutStage)."""

    # -- the loop

    async def _run(self) -> None:
        if self.active:
            self.begin()
        while not self.done:
            if not self.held:
                self.held.append(await self.input.get())
            item = self.held[0]
            if item is EOF:
                if self.active:
                    await self.at_eof()
                self._finish()
                return
            if self.active:
                await self.process(item)
            else:
                self.emit_front()

    def begin(self) -> None:
        """Called when an active stage starts (timers go here)."""

    async def process(self, chunk: Chunk) -> None:
        self.emit_front()

    async def at_eof(self) -> None:
        """Called with EOF at the front, before it is passed on."""

    # -- helpers for subclasses

    def emit_front(self, size: int | None = None) -> None:
        """Pass on the first ``size`` bytes of ``held[0]`` (all by default)."""
        chunk = self.held[0]
        if size is None or size >= len(chunk.data):
            self.held.popleft()
            self.output.put_nowait(chunk)
            return
        self.output.put_nowait(Chunk(chunk.data[:size], chunk.stamp))
        self.held[0] = Chunk(chunk.data[size:], chunk.stamp)

    def drop_front(self) -> None:
        chunk = self.held.popleft()
        self.link.release(len(chunk.data))

    def close_stream(self) -> None:
        """End the stream here, as a toxic closing its stub does in Toxiproxy:
        drop what is held, pass EOF on, stop reading input."""
        if self.done:
            return
        for item in self.held:
            if item is not EOF:
                self.link.release(len(item.data))
        self.held.clear()
        self._finish()
        current = asyncio.current_task()
        if self.task is not None and self.task is not current:
            self.task.cancel()

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        self._timers.append(asyncio.get_running_loop().call_later(delay, callback))

    def _finish(self) -> None:
        self._cancel_timers()
        self.held.clear()
        self.done = True
        self.output.put_nowait(EOF)

    def _cancel_timers(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()


class LatencyStage(Stage):
    """Each chunk leaves ``latency`` ms (+/- uniform ``jitter``) after it arrived.

    Chunks are handled one at a time, so order is preserved even when the
    jitter of a later chunk is smaller.
    """

    async def process(self, chunk: Chunk) -> None:
        jitter = self.attrs["jitter"]
        delay = self.attrs["latency"] + (random.uniform(-jitter, jitter) if jitter else 0)
        wait = chunk.stamp + delay / 1000.0 - asyncio.get_running_loop().time()
        if wait > 0:
            await asyncio.sleep(wait)
        self.emit_front()


class BandwidthStage(Stage):
    """Paces bytes at ``rate`` KB/s (1 KB = 1024 bytes), in 50 ms slices.

    A virtual clock (when the previous byte finished "transmitting") is kept
    across chunks, without credit for idle time, so a burst is spread out but
    an idle link does not save up bandwidth.
    """

    SLICE_SECONDS = 0.05

    def __init__(self, spec: ToxicSpec, link: "LinkHandle"):
        super().__init__(spec, link)
        self.clock = 0.0

    async def process(self, chunk: Chunk) -> None:
        loop = asyncio.get_running_loop()
        rate = self.attrs["rate"] * 1024.0
        piece = max(1, int(rate * self.SLICE_SECONDS))
        while self.held and self.held[0] is not EOF:
            size = min(piece, len(self.held[0].data))
            self.clock = max(self.clock, loop.time()) + size / rate
            wait = self.clock - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            last = size == len(self.held[0].data)
            self.emit_front(size)
            if last:
                return


class SlowCloseStage(Stage):
    """Passes data; holds the EOF for ``delay`` ms before passing it on."""

    async def at_eof(self) -> None:
        await asyncio.sleep(self.attrs["delay"] / 1000.0)


class TimeoutStage(Stage):
    """Drops all data; closes the stream ``timeout`` ms after it started
    (0: never).  Removing it closes the stream too, as Toxiproxy's cleanup
    does: bytes were dropped, so letting the stream resume would corrupt it."""

    def begin(self) -> None:
        if self.attrs["timeout"] > 0:
            self.call_later(self.attrs["timeout"] / 1000.0, self.close_stream)

    async def process(self, chunk: Chunk) -> None:
        self.drop_front()

    def on_remove(self) -> None:
        if self.active:
            self.close_stream()


class ResetPeerStage(Stage):
    """On the first chunk (or EOF) it sees, waits ``timeout`` ms, then resets
    the connection: SO_LINGER 0 and close, so both peers get a TCP RST."""

    async def process(self, chunk: Chunk) -> None:
        await self._reset()

    async def at_eof(self) -> None:
        await self._reset()

    async def _reset(self) -> None:
        await asyncio.sleep(self.attrs["timeout"] / 1000.0)
        self.link.reset_connection()
        self.close_stream()


class SlicerStage(Stage):
    """Cuts each chunk into slices of ``average_size`` +/- ``size_variation``
    bytes, with ``delay`` microseconds after each slice."""

    async def process(self, chunk: Chunk) -> None:
        average = self.attrs["average_size"]
        variation = self.attrs["size_variation"]
        delay = self.attrs["delay"] / 1_000_000.0
        while self.held and self.held[0] is not EOF:
            size = average + (random.randint(-variation, variation) if variation else 0)
            last = size >= len(self.held[0].data)
            self.emit_front(max(1, size))
            await asyncio.sleep(delay)
            if last:
                return


class LimitDataStage(Stage):
    """Passes at most ``bytes`` bytes over the life of the link, then closes.

    The count survives updates (Toxiproxy keeps it as per-link state)."""

    def __init__(self, spec: ToxicSpec, link: "LinkHandle"):
        super().__init__(spec, link)
        self.sent = 0

    async def process(self, chunk: Chunk) -> None:
        room = max(0, self.attrs["bytes"] - self.sent)
        size = min(room, len(chunk.data))
        if size:
            self.emit_front(size)
            self.sent += size
        if self.sent >= self.attrs["bytes"]:
            self.close_stream()


STAGES: dict[str, type[Stage]] = {
    "latency": LatencyStage,
    "bandwidth": BandwidthStage,
    "slow_close": SlowCloseStage,
    "timeout": TimeoutStage,
    "reset_peer": ResetPeerStage,
    "slicer": SlicerStage,
    "limit_data": LimitDataStage,
}
assert set(STAGES) == set(ATTRIBUTES)


def make_stage(spec: ToxicSpec, link: "LinkHandle") -> Stage:
    return STAGES[spec.type](spec, link)
