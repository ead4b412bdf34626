"""A Toxiproxy-compatible TCP fault proxy, in asyncio.

No Toxiproxy binary can be installed on the project's machines (no Debian
package, no PyPI wheel with the server), so this package speaks the Toxiproxy
2.x HTTP API closely enough for toxiproxy-python 0.1.1 to drive it unmodified,
and implements its toxics (latency, bandwidth, slow_close, timeout,
reset_peer, slicer, limit_data).

Modules: ``http`` (tiny HTTP/1.1 server), ``api`` (routes and errors),
``proxy`` (listener and toxic table of one proxy), ``link`` (one proxied
connection and its per-direction toxic chains), ``toxics`` (one class per
toxic), ``server`` (``ProxyServer``), ``cli`` (``chaoslog proxy``).
"""

from .api import VERSION
from .proxy import ListenError
from .server import ProxyServer

__all__ = ["ProxyServer", "ListenError", "VERSION"]
