"""Controller -> broker channels (Kafka's ControllerChannelManager and
RequestSendThread): one queue and one sender thread per live broker, so a
slow or unreachable broker delays only its own requests, never the event
queue or the other brokers (docs/design.md#request-batch).

A request to an unreachable broker is retried with backoff, on a new
connection, until the controller removes the broker because ZooKeeper says it
is gone (ZooKeeper is the source of truth about liveness, as in Kafka); then
the broker's pending requests are dropped and their callbacks told so
(response None). Brokers handle a repeated request idempotently (same leader
epoch), so resending after a timeout is safe."""
from __future__ import annotations

import logging
import socket
import struct
import threading
from collections import deque
from typing import Any, Callable

from cluster.protocol import control
from cluster.security import PLAINTEXT, BrokerSecurity

log = logging.getLogger("chaoslog.controller.channel")

Callback = Callable[[int, Any, Any], None]  # (broker_id, request, response or None)


class BrokerChannel:
    def __init__(self, manager: "ChannelManager", broker_id: int, host: str, port: int) -> None:
        self.manager = manager
        self.broker_id = broker_id
        self.addr = (host, port)
        self.queue: deque[tuple[Any, Callback | None]] = deque()
        self.cond = threading.Condition()
        self.stopped = False
        self.sock: socket.socket | None = None
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"controller-{manager.controller_id}-to-broker-{broker_id}")

    def enqueue(self, request: Any, callback: Callback | None) -> None:
        with self.cond:
            if self.stopped:
                dropped = True
            else:
                self.queue.append((request, callback))
                self.cond.notify()
                dropped = False
        if dropped and callback:
            callback(self.broker_id, request, None)

    def stop(self) -> list[tuple[Any, Callback | None]]:
        with self.cond:
            self.stopped = True
            pending = list(self.queue)
            self.queue.clear()
            self.cond.notify_all()
        self._close()
        return pending

    def _close(self) -> None:
        s, self.sock = self.sock, None
        if s is not None:
            try:
                s.close()
            except OSError:
                pass

    def _connect(self) -> socket.socket:
        s = self.manager.security.connect(self.addr, self.manager.connect_timeout,
                                          f"controller-{self.manager.controller_id}".encode())
        s.settimeout(self.manager.socket_timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            sock = self.sock
            if sock is None:
                raise ConnectionError("channel closed")
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)

    def _roundtrip(self, request: Any) -> Any:
        corr = self.manager.next_correlation_id()
        frame = control.encode_request(request, corr, f"controller-{self.manager.controller_id}")
        if self.sock is None:
            new = self._connect()
            with self.cond:
                # A connect can outlast remove_broker (up to connect_timeout):
                # by then another broker may listen at this address (a
                # container restarted with the dead broker's IP), and the
                # request is not for it.
                if self.stopped:
                    new.close()
                    raise ConnectionError("channel closed")
                self.sock = new
        sock = self.sock
        if sock is None:
            raise ConnectionError("channel closed")
        sock.sendall(frame)
        while True:
            (size,) = struct.unpack(">i", self._recv_exact(4))
            if size < 4 or size > 100 * 1024 * 1024:
                raise control.ProtocolError(f"bad response size {size}")
            got_corr, body = control.decode_response_with_header(request.API_KEY,
                                                                 self._recv_exact(size))
            if got_corr == corr:
                return body
            # a late answer to an earlier, timed-out attempt: skip it

    def _run(self) -> None:
        backoff = self.manager.backoff_min
        while True:
            with self.cond:
                while not self.queue and not self.stopped:
                    self.cond.wait()
                if self.stopped:
                    return
                request, callback = self.queue[0]
            try:
                response = self._roundtrip(request)
            except Exception as e:  # socket errors, bad frames, a concurrent stop()
                self._close()
                if self.stopped:
                    return
                log.warning("controller %d: request %s to broker %d at %s:%d failed (%r); "
                            "retrying in %.1fs", self.manager.controller_id,
                            type(request).__name__, self.broker_id, *self.addr, e, backoff)
                with self.cond:
                    self.cond.wait_for(lambda: self.stopped, timeout=backoff)
                backoff = min(backoff * 2, self.manager.backoff_max)
                continue
            backoff = self.manager.backoff_min
            with self.cond:
                if self.stopped:
                    return
                if self.queue and self.queue[0][0] is request:
                    self.queue.popleft()
            if callback:
                try:
                    callback(self.broker_id, request, response)
                except Exception:
                    log.exception("response callback failed")


class ChannelManager:
    def __init__(self, controller_id: int, *, peer_addresses: dict[int, tuple[str, int]] | None = None,
                 socket_timeout: float = 30.0, connect_timeout: float = 5.0,
                 backoff_min: float = 0.1, backoff_max: float = 2.0,
                 security: BrokerSecurity = PLAINTEXT) -> None:
        self.controller_id = controller_id
        self.security = security   # TLS and SASL on the brokers' listener (cluster/security.py)
        self.peer_addresses = peer_addresses or {}
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self.channels: dict[int, BrokerChannel] = {}
        self._corr = 0
        self._lock = threading.Lock()

    def next_correlation_id(self) -> int:
        with self._lock:
            self._corr = (self._corr + 1) & 0x7FFFFFFF
            return self._corr

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        if broker_id in self.channels:
            return
        host, port = self.peer_addresses.get(broker_id, (host, port))
        ch = BrokerChannel(self, broker_id, host, port)
        self.channels[broker_id] = ch
        ch.thread.start()

    def remove_broker(self, broker_id: int) -> None:
        ch = self.channels.pop(broker_id, None)
        if ch is None:
            return
        for request, callback in ch.stop():
            if callback:
                callback(broker_id, request, None)

    def send(self, broker_id: int, request: Any, callback: Callback | None = None) -> bool:
        ch = self.channels.get(broker_id)
        if ch is None:
            if callback:
                callback(broker_id, request, None)
            return False
        ch.enqueue(request, callback)
        return True

    def shutdown(self) -> None:
        for b in list(self.channels):
            self.remove_broker(b)

    def fence(self) -> None:
        """Stop every channel at once without blocking (called from kazoo's
        thread when the session is lost): nothing more goes out."""
        for ch in list(self.channels.values()):
            ch.stop()
