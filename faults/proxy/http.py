"""A minimal HTTP/1.1 server on asyncio streams, enough for the Toxiproxy API.

Why not http.server or a framework: the API must live on the same event loop
as the proxies (toxic edits are synchronous loop-side operations), the
stdlib server is thread-based, and the project adds no web dependency.

Supported: persistent connections (HTTP/1.1 default, ``Connection: close``,
HTTP/1.0 keep-alive), request bodies by Content-Length or chunked encoding,
``Expect: 100-continue``.  Every response carries Content-Length (none on
204), so clients never depend on the connection closing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Awaitable, Callable
from urllib.parse import unquote

MAX_HEADER_LINES = 100
MAX_BODY = 1024 * 1024


class HttpError(Exception):
    """The request cannot be parsed; answered with ``status`` and the connection closed."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes = b""

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def segments(self) -> list[str]:
        """Path segments, percent-decoded one by one (a name may hold ``%2F``)."""
        return [unquote(part) for part in self.path.split("/")[1:]]

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in connection
        return "close" not in connection


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, payload: Any) -> "Response":
        return cls(status, json.dumps(payload).encode() + b"\n")

    @classmethod
    def text(cls, status: int, text: str) -> "Response":
        return cls(status, text.encode(), "text/plain; charset=utf-8")

    def encode(self, keep_alive: bool) -> bytes:
        try:
            reason = HTTPStatus(self.status).phrase
        except ValueError:
            reason = "Unknown"
        lines = [f"HTTP/1.1 {self.status} {reason}"]
        if self.status != 204:
            lines.append(f"Content-Type: {self.content_type}")
            lines.append(f"Content-Length: {len(self.body)}")
        for name, value in self.headers.items():
            lines.append(f"{name}: {value}")
        if not keep_alive:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if self.status == 204 else head + self.body


Handler = Callable[[Request], Awaitable[Response]]


async def read_request(reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> Request | None:
    """The next request on the connection, or None when the client closed it."""
    line = await reader.readline()
    while line in (b"\r\n", b"\n"):  # tolerated between requests (RFC 9112 2.2)
        line = await reader.readline()
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise HttpError(400, "truncated request line")
    parts = line.decode("latin-1").strip().split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADER_LINES):
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n"):
            break
        if not raw.endswith(b"\n"):
            raise HttpError(400, "truncated headers")
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep:
            raise HttpError(400, "malformed header")
        headers[name.strip().lower()] = value.strip()
    else:
        raise HttpError(431, "too many headers")
    request = Request(method.upper(), target, version, headers)
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.body = await _read_body(reader, headers)
    return request


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size_line = await reader.readline()
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                raise HttpError(400, "bad chunk size") from None
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(body)
            if len(body) + size > MAX_BODY:
                raise HttpError(413, "request body too large")
            body += await reader.readexactly(size)
            await reader.readline()
    length = headers.get("content-length")
    if length is None:
        return b""
    if not length.isdigit():
        raise HttpError(400, "bad Content-Length")
    if int(length) > MAX_BODY:
        raise HttpError(413, "request body too large")
    return await reader.readexactly(int(length))


def browser_refusal(request: Request) -> str | None:
    """Why a request that a web browser made is refused, if it is one. The
    API has no authentication: its guard is that only processes of this
    machine reach it (README.md, "Control surfaces"). A page in a browser
    here could still send it requests; browsers name the page's origin
    (Origin), and a page that rebinds its own name to 127.0.0.1 sends that
    name as Host. The harness's clients send neither: no Origin, and an
    address or localhost as Host."""
    if "origin" in request.headers:
        return "requests from web pages (an Origin header) are refused"
    host = request.headers.get("host", "")
    name = host[1:host.find("]")] if host.startswith("[") else host.rsplit(":", 1)[0]
    if name and name != "localhost":
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return f"Host {name!r} is not an address or localhost (a rebound name?)"
    return None


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           handler: Handler) -> None:
    """Answer requests on one connection until the client or an error ends it."""
    try:
        while True:
            try:
                request = await read_request(reader, writer)
            except HttpError as exc:
                writer.write(Response.text(exc.status, f"{exc}\n").encode(keep_alive=False))
                await writer.drain()
                return
            if request is None:
                return
            refused = browser_refusal(request)
            response = (Response.text(403, f"{refused}\n") if refused
                        else await handler(request))
            keep = request.keep_alive
            writer.write(response.encode(keep_alive=keep))
            await writer.drain()
            if not keep:
                return
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
            ValueError):
        pass  # client went away or sent garbage (an overlong line): just close
    finally:
        writer.close()
