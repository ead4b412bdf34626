"""``ProxyServer``: the API listener plus the proxy table, on one event loop.

Everything (API requests, accepts, toxic stages) runs on a single asyncio
loop, which is what makes toxic edits atomic with respect to the data flow.
Two ways to run it:

* inside an existing loop: ``await server.start()`` ... ``await server.close()``
  (the CLI does this);
* from synchronous code (tests, the harness): ``server.start_in_thread()``
  runs a private loop in a daemon thread and returns once the API listens;
  ``server.stop()`` closes every proxy and connection and ends the thread.
"""

from __future__ import annotations

import asyncio
import threading

from .api import Api
from .exposure import API, Exposure
from .http import serve_connection
from .proxy import ListenError, Proxy, bind_listener, format_address


class ProxyServer:
    """A Toxiproxy-compatible server.  ``port=0`` picks a free port; read the
    real one from ``.port`` once started.

    The API and every proxy listen on loopback addresses only, unless
    ``exposure`` allows others (then each one bound warns on stderr:
    faults/proxy/exposure.py)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8474,
                 exposure: Exposure | None = None):
        self.host = host
        self.port = port
        self.exposure = exposure or Exposure()
        self.proxies: dict[str, Proxy] = {}
        self.api = Api(self.proxies, self.exposure)
        self._server: asyncio.base_events.Server | None = None
        self._clients: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{format_address((self.host, self.port))}"

    # -- on a running loop

    async def start(self) -> None:
        """Bind the API address (``ListenError`` if impossible) and serve."""
        address = format_address((self.host, self.port))
        try:
            sock = bind_listener(address, self.exposure, API)
        except ListenError as exc:
            raise ListenError(f"cannot listen on {address}: {exc.reason}", exc.reason) from None
        self.port = sock.getsockname()[1]
        self.exposure.bound(API, format_address((self.host, self.port)), sock.getsockname()[0])
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._accepted, sock=sock)

    async def close(self) -> None:
        """Stop the API and every proxy; all sockets are closed on return."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._clients):
            task.cancel()
        for proxy in list(self.proxies.values()):
            proxy.stop()
        self.proxies.clear()
        await asyncio.sleep(0)  # let cancelled tasks and aborted transports finish

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(
            serve_connection(reader, writer, self.api.handle))
        self._clients.add(task)
        task.add_done_callback(self._clients.discard)

    # -- from synchronous code

    def start_in_thread(self, timeout: float = 10.0) -> "ProxyServer":
        """Run on a private loop in a daemon thread; returns when listening."""
        if self._thread is not None:
            raise RuntimeError("server already started")
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # reported to the caller
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                _drain_tasks(loop)
                loop.close()

        self._thread = threading.Thread(target=run, name="chaoslog-proxy", daemon=True)
        self._thread.start()
        if not started.wait(timeout):
            raise TimeoutError("proxy server did not start")
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Close everything and end the thread started by ``start_in_thread``."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        if loop.is_running():
            asyncio.run_coroutine_threadsafe(self.close(), loop).result(timeout)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        self._thread = None

    def __enter__(self) -> "ProxyServer":
        return self.start_in_thread()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _drain_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on a stopped loop and let it unwind, so closing the
    loop does not warn about pending tasks."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
