"""One proxied TCP connection: two links, each a chain of toxic stages.

``Link`` is one direction (Toxiproxy's ToxicLink): a reader task puts chunks
from the source socket on the first queue, each stage moves them to the next
queue, and a writer task writes the last queue to the destination socket::

    source -> reader -> [stage 0] -> [stage 1] -> ... -> writer -> destination

"upstream" is client -> server bytes, "downstream" server -> client.

Closing follows Toxiproxy: when EOF (the source closed, or a toxic closed the
stream) reaches the writer, the destination socket is closed entirely, not
half-closed.  The other link then reads EOF from that socket, passes it down
its own chain and closes the other socket; the connection is over when both
writers are done.  ``Connection.kill`` is the abrupt path (proxy disabled or
deleted, reset_peer).

Back-pressure: stage queues are unbounded so a stage can be spliced out
without blocking, and instead the reader stops reading while more than
``MAX_INFLIGHT`` bytes of the link are queued or held by stages.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import Callable

from .toxics import EOF, STREAMS, Chunk, Stage, ToxicSpec, make_stage

READ_SIZE = 64 * 1024
MAX_INFLIGHT = 1024 * 1024

log = logging.getLogger(__name__)


def watch(task: asyncio.Task, conn: "Connection") -> asyncio.Task:
    """Kill the connection if one of its tasks dies of a bug, rather than
    leaving a link silently stalled."""

    def done(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("proxy %s: connection task failed", conn.proxy_name,
                      exc_info=task.exception())
            conn.kill()

    task.add_done_callback(done)
    return task


class Link:
    """One direction of a connection, with its chain of stages."""

    def __init__(self, conn: "Connection", stream: str,
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.conn = conn
        self.stream = stream
        self.reader = reader
        self.writer = writer
        self.stages: list[Stage] = []
        self.tail: asyncio.Queue = asyncio.Queue()  # the writer's queue
        self.entry: asyncio.Queue = self.tail  # where the reader puts chunks
        self.inflight = 0
        self.finished = False
        self._room = asyncio.Event()
        self._room.set()
        self.tasks: list[asyncio.Task] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.tasks = [watch(loop.create_task(self._read()), self.conn),
                      watch(loop.create_task(self._write()), self.conn)]

    # -- chain edits: synchronous, so no chunk can slip between the steps

    def add_stage(self, spec: ToxicSpec) -> None:
        """Append a toxic at the end of the chain, like Toxiproxy's AddToxic."""
        if self.finished:
            return
        stage = make_stage(spec, self)
        stage.output = self.tail
        if self.stages:
            self.stages[-1].output = stage.input
        else:
            self.entry = stage.input
        self.stages.append(stage)
        stage.start()
        watch(stage.task, self.conn)

    def update_stage(self, spec: ToxicSpec) -> None:
        stage = self._find(spec.name)
        if stage is not None:
            before = stage.task
            stage.restart(spec)
            if stage.task is not before:
                watch(stage.task, self.conn)

    def remove_stage(self, name: str) -> None:
        """Splice a stage out without losing or reordering bytes: what it held,
        then what waits in its queue, go to its output before the previous
        stage is pointed there."""
        stage = self._find(name)
        if stage is None:
            return
        index = self.stages.index(stage)
        stage.on_remove()
        held = stage.stop()
        out = stage.output
        if not stage.done:
            for item in held:
                out.put_nowait(item)
            while not stage.input.empty():
                out.put_nowait(stage.input.get_nowait())
        if index == 0:
            self.entry = out
        else:
            self.stages[index - 1].output = out
        del self.stages[index]

    def _find(self, name: str) -> Stage | None:
        for stage in self.stages:
            if stage.spec.name == name:
                return stage
        return None

    # -- flow accounting

    def release(self, size: int) -> None:
        """Bytes have left the link (written or dropped): maybe resume reading."""
        self.inflight -= size
        if self.inflight < MAX_INFLIGHT:
            self._room.set()

    def reset_connection(self) -> None:
        """The reset_peer toxic: both peers of the connection get a TCP RST."""
        self.conn.kill(reset=True)

    # -- tasks

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                while self.inflight >= MAX_INFLIGHT:
                    self._room.clear()
                    await self._room.wait()
                data = await self.reader.read(READ_SIZE)
                if not data:
                    break
                self.inflight += len(data)
                self.entry.put_nowait(Chunk(data, loop.time()))
        except (ConnectionError, OSError):
            pass
        self.entry.put_nowait(EOF)

    async def _write(self) -> None:
        try:
            while True:
                item = await self.tail.get()
                if item is EOF:
                    break
                self.writer.write(item.data)
                await self.writer.drain()
                self.release(len(item.data))
        except (ConnectionError, OSError):
            pass
        self.finished = True
        self.writer.close()
        self.conn.link_finished()

    def cancel(self) -> None:
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()
        for stage in self.stages:
            if stage.task is not current:
                stage.stop()


class Connection:
    """A client connection and its upstream connection, joined by two links."""

    def __init__(self, proxy_name: str,
                 client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 on_close: Callable[["Connection"], None]):
        self.proxy_name = proxy_name
        self.on_close = on_close  # the proxy forgets the connection
        self.client_writer = client[1]
        self.upstream_writer = upstream[1]
        self.links = {
            "upstream": Link(self, "upstream", client[0], upstream[1]),
            "downstream": Link(self, "downstream", upstream[0], client[1]),
        }
        self.closed = False
        self._open_links = 2

    def start(self, toxics: dict[str, list[ToxicSpec]]) -> None:
        """Build each link's chain from the proxy's toxics and start pumping."""
        for stream in STREAMS:
            link = self.links[stream]
            for spec in toxics[stream]:
                link.add_stage(spec)
            link.start()

    def link_finished(self) -> None:
        self._open_links -= 1
        if self._open_links == 0:
            self._close(abort=False)

    def kill(self, reset: bool = False) -> None:
        """Drop both sockets now; with ``reset`` the peers get a TCP RST."""
        if reset:
            for writer in (self.client_writer, self.upstream_writer):
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                        struct.pack("ii", 1, 0))
                    except OSError:
                        pass
        self._close(abort=True)

    def _close(self, abort: bool) -> None:
        if self.closed:
            return
        self.closed = True
        for link in self.links.values():
            link.finished = True
            link.cancel()
        for writer in (self.client_writer, self.upstream_writer):
            if abort:
                writer.transport.abort()
            else:
                writer.close()
        self.on_close(self)
