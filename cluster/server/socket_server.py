"""The socket server: Kafka framing over asyncio streams.

Per connection, a reader reads whole frames (int32 size, then the request),
hands each to KafkaApis.handle at once and in order, and queues what it got
back; a writer writes the responses in request order, awaiting those still
pending (acks=all produce, long-polling fetch). Up to MAX_IN_FLIGHT requests
of a connection may be pending; beyond that the reader stops reading, which
is the backpressure. A frame larger than socket.request.max.bytes (or with
a negative size), a malformed header or body, or an unknown api closes the
connection; nothing a client sends can stop the broker.

On a TLS listener asyncio's SSL transport does the encryption; on a SASL
listener each connection first goes through its own SaslAuthenticator
(cluster/server/authenticator.py), which answers the authentication
requests and holds back every other request until the client is
authenticated (docs/design.md#security).
"""
from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from typing import Callable

from cluster.server.authenticator import PASS, FinalResponse, SaslAuthenticator
from cluster.server.kafka_apis import CLOSE, KafkaApis

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 64
_SIZE = struct.Struct(">i")


class SocketServer:
    def __init__(self, apis: KafkaApis, host: str, port: int, max_request_bytes: int,
                 ssl_context: ssl.SSLContext | None = None,
                 authenticator: Callable[[object], SaslAuthenticator] | None = None):
        self.apis = apis
        self.host, self.port = host, port
        self.max_request_bytes = max_request_bytes
        self.ssl_context = ssl_context
        self.authenticator = authenticator   # peer -> a new connection's authenticator
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  reuse_address=True, limit=1 << 20,
                                                  ssl=self.ssl_context)
        log.info("listening on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        await asyncio.gather(*self._conns, return_exceptions=True)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2)
            except asyncio.TimeoutError:
                pass

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._conns.add(task)
        peer = writer.get_extra_info("peername")
        queue: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
        writer_task = asyncio.get_running_loop().create_task(self._write_loop(queue, writer, peer))
        auth = self.authenticator(peer) if self.authenticator else None
        try:
            while not writer_task.done():
                size_bytes = await reader.readexactly(4)
                (size,) = _SIZE.unpack(size_bytes)
                limit = (auth and auth.max_frame_bytes) or self.max_request_bytes
                if size < 0 or size > limit:
                    log.warning("%s: request of %d bytes exceeds %s=%d; closing connection",
                                peer, size, "socket.request.max.bytes" if limit ==
                                self.max_request_bytes else "the size allowed before SASL "
                                "authentication", limit)
                    break
                frame = await reader.readexactly(size)
                result = auth.handle(frame) if auth else PASS
                if result is PASS:
                    result = self.apis.handle(frame)
                if result is None:
                    continue
                if result is CLOSE:
                    break
                if isinstance(result, FinalResponse):
                    await queue.put(bytes(result))
                    break
                if not isinstance(result, (bytes, bytearray)):
                    result = asyncio.ensure_future(result)
                await queue.put(result)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            writer_task.cancel()
            raise
        except Exception:
            log.exception("%s: connection failed", peer)
        finally:
            self._conns.discard(task)
        # Let queued responses go out, then close.
        if not writer_task.done():
            await queue.put(CLOSE)
        try:
            await writer_task
        except (asyncio.CancelledError, Exception):
            pass

    async def _write_loop(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, peer) -> None:
        try:
            while True:
                item = await queue.get()
                if item is CLOSE:
                    break
                if not isinstance(item, (bytes, bytearray)):
                    item = await item
                    if item is CLOSE:
                        break
                    if item is None:
                        continue
                writer.write(item)
                if queue.empty():
                    await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("%s: response failed", peer)
        finally:
            # Drop whatever is still pending (the connection is gone).
            while not queue.empty():
                item = queue.get_nowait()
                if isinstance(item, asyncio.Future):
                    item.cancel()
            writer.close()
