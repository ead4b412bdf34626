"""The Toxiproxy 2.x HTTP API: routes, request checks, status codes, errors.

Status codes and error bodies (``{"error": ..., "status": N}``) are those
of Toxiproxy 2.x, because toxiproxy-python maps 400/404/409 to exceptions and
calls ``.json()`` on everything else.  One deliberate difference: a listen
address that cannot be bound (in use, not local) is a 400, where Toxiproxy
answers 500; with a 500 toxiproxy-python would fail with a KeyError instead
of raising a clear exception.

Handlers run one at a time (a lock in :class:`Api`): creating or enabling a
proxy awaits the listener, and the proxy table must not change meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Awaitable, Callable

from .exposure import Exposure
from .http import Request, Response
from .proxy import LOOPBACK_ONLY, ListenError, Proxy, split_host_port
from .toxics import ToxicError, ToxicSpec

VERSION = "2.12.0-chaoslog"

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status

    def response(self) -> Response:
        return Response.json(self.status, {"error": str(self), "status": self.status})


def bad_body(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", 400)


def missing(field: str) -> ApiError:
    return ApiError(f"missing required field: {field}", 400)


PROXY_NOT_FOUND = ("proxy not found", 404)
TOXIC_NOT_FOUND = ("toxic not found", 404)


def decode_json(request: Request) -> Any:
    try:
        return json.loads(request.body.decode("utf-8") or "null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_body(str(exc)) from None


def typed(obj: dict, key: str, kind: type, default: Any) -> Any:
    """``obj[key]`` if present and of ``kind`` (JSON null counts as absent)."""
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise bad_body(f"{key} must be a {kind.__name__}")
    return value


def check_upstream(upstream: str) -> None:
    try:
        split_host_port(upstream)
    except ValueError as exc:
        raise bad_body(f"upstream {exc}") from None


Route = Callable[..., Awaitable[Response]]


class Api:
    """Request handlers over the server's proxy table (name -> Proxy)."""

    def __init__(self, proxies: dict[str, Proxy], exposure: Exposure = LOOPBACK_ONLY):
        self.proxies = proxies
        self.exposure = exposure   # where new proxies may listen
        self._lock = asyncio.Lock()

    async def handle(self, request: Request) -> Response:
        route, args, allowed = self._route(request)
        if route is None:
            if allowed:
                return ApiError("method not allowed", 405).response()
            return Response.text(404, "404 page not found\n")
        async with self._lock:
            try:
                return await route(request, *args)
            except ApiError as exc:
                return exc.response()
            except ToxicError as exc:
                return ApiError(str(exc), exc.status).response()
            except ListenError as exc:
                return ApiError(str(exc), 400).response()
            except Exception as exc:  # a bug: answer like Toxiproxy, keep serving
                log.exception("%s %s failed", request.method, request.path)
                return ApiError(str(exc) or type(exc).__name__, 500).response()

    def _route(self, request: Request) -> tuple[Route | None, tuple, bool]:
        """(handler, path arguments, whether the path exists for other methods)."""
        seg = request.segments
        m = request.method
        table: dict[str, Route] = {}
        args: tuple = ()
        if seg == ["reset"]:
            table = {"POST": self.reset}
        elif seg == ["version"]:
            table = {"GET": self.version}
        elif seg == ["populate"]:
            table = {"POST": self.populate}
        elif seg == ["proxies"]:
            table = {"GET": self.list_proxies, "POST": self.create_proxy}
        elif len(seg) == 2 and seg[0] == "proxies":
            table = {"GET": self.show_proxy, "POST": self.update_proxy,
                     "PATCH": self.update_proxy, "DELETE": self.delete_proxy}
            args = (seg[1],)
        elif len(seg) == 3 and seg[0] == "proxies" and seg[2] == "toxics":
            table = {"GET": self.list_toxics, "POST": self.create_toxic}
            args = (seg[1],)
        elif len(seg) == 4 and seg[0] == "proxies" and seg[2] == "toxics":
            table = {"GET": self.show_toxic, "POST": self.update_toxic,
                     "PATCH": self.update_toxic, "DELETE": self.delete_toxic}
            args = (seg[1], seg[3])
        return table.get(m), args, bool(table)

    def _proxy(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise ApiError(*PROXY_NOT_FOUND)
        return proxy

    # -- server-wide

    async def version(self, request: Request) -> Response:
        return Response(200, json.dumps({"version": VERSION}).encode() + b"\n",
                        "application/json; charset=utf-8")

    async def reset(self, request: Request) -> Response:
        """Enable every proxy and remove every toxic."""
        for proxy in list(self.proxies.values()):
            await proxy.start()
            proxy.reset_toxics()
        return Response(204)

    async def populate(self, request: Request) -> Response:
        """Create or replace proxies: an existing proxy with the same listen
        and upstream is kept as is (toxics and connections included)."""
        body = decode_json(request)
        if not isinstance(body, list):
            raise bad_body("expected a JSON array of proxies")
        items = []
        for i, entry in enumerate(body, start=1):
            if not isinstance(entry, dict):
                raise bad_body(f"proxy {i} must be an object")
            name = typed(entry, "name", str, "")
            upstream = typed(entry, "upstream", str, "")
            listen = typed(entry, "listen", str, "")
            enabled = typed(entry, "enabled", bool, True)
            if not name:
                raise missing(f"name at proxy {i}")
            if not upstream:
                raise missing(f"upstream at proxy {i}")
            if not listen:
                raise missing(f"listen at proxy {i}")
            check_upstream(upstream)
            items.append((name, listen, upstream, enabled))
        done: list[Proxy] = []
        for name, listen, upstream, enabled in items:
            existing = self.proxies.get(name)
            if existing is not None:
                if existing.listen == listen and existing.upstream == upstream:
                    done.append(existing)
                    continue
                existing.stop()
                del self.proxies[name]
            proxy = Proxy(name, listen, upstream, self.exposure)
            try:
                if enabled:
                    await proxy.start()
            except ListenError as exc:
                return Response.json(400, {"error": str(exc), "status": 400,
                                           "proxies": [p.to_json() for p in done]})
            self.proxies[name] = proxy
            done.append(proxy)
        return Response.json(201, {"proxies": [p.to_json() for p in done]})

    # -- proxies

    async def list_proxies(self, request: Request) -> Response:
        return Response.json(200, {name: p.to_json() for name, p in self.proxies.items()})

    async def create_proxy(self, request: Request) -> Response:
        body = decode_json(request)
        if not isinstance(body, dict):
            raise bad_body("expected a JSON object")
        name = typed(body, "name", str, "")
        upstream = typed(body, "upstream", str, "")
        listen = typed(body, "listen", str, "")
        enabled = typed(body, "enabled", bool, True)
        if not name:
            raise missing("name")
        if not upstream:
            raise missing("upstream")
        if not listen:
            raise missing("listen")
        check_upstream(upstream)
        if name in self.proxies:
            raise ApiError("proxy already exists", 409)
        proxy = Proxy(name, listen, upstream, self.exposure)
        if enabled:
            await proxy.start()
        self.proxies[name] = proxy
        return Response.json(201, proxy.to_json())

    async def show_proxy(self, request: Request, name: str) -> Response:
        return Response.json(200, self._proxy(name).to_json())

    async def update_proxy(self, request: Request, name: str) -> Response:
        """Partial update: absent fields keep their value."""
        proxy = self._proxy(name)
        body = decode_json(request)
        if not isinstance(body, dict):
            raise bad_body("expected a JSON object")
        listen = typed(body, "listen", str, proxy.listen) or proxy.listen
        upstream = typed(body, "upstream", str, proxy.upstream) or proxy.upstream
        enabled = typed(body, "enabled", bool, proxy.enabled)
        check_upstream(upstream)
        await proxy.update(listen, upstream, enabled)
        return Response.json(200, proxy.to_json())

    async def delete_proxy(self, request: Request, name: str) -> Response:
        proxy = self._proxy(name)
        proxy.stop()
        del self.proxies[name]
        return Response(204)

    # -- toxics

    async def list_toxics(self, request: Request, name: str) -> Response:
        return Response.json(200, self._proxy(name).toxic_list())

    async def create_toxic(self, request: Request, name: str) -> Response:
        proxy = self._proxy(name)
        spec = ToxicSpec.from_request(decode_json(request))
        if proxy.find_toxic(spec.name) is not None:
            raise ApiError("toxic already exists", 409)
        proxy.add_toxic(spec)
        return Response.json(200, spec.to_json())

    async def show_toxic(self, request: Request, name: str, toxic: str) -> Response:
        spec = self._proxy(name).find_toxic(toxic)
        if spec is None:
            raise ApiError(*TOXIC_NOT_FOUND)
        return Response.json(200, spec.to_json())

    async def update_toxic(self, request: Request, name: str, toxic: str) -> Response:
        proxy = self._proxy(name)
        spec = proxy.find_toxic(toxic)
        if spec is None:
            raise ApiError(*TOXIC_NOT_FOUND)
        new = spec.updated(decode_json(request))
        proxy.update_toxic(new)
        return Response.json(200, new.to_json())

    async def delete_toxic(self, request: Request, name: str, toxic: str) -> Response:
        proxy = self._proxy(name)
        if proxy.find_toxic(toxic) is None:
            raise ApiError(*TOXIC_NOT_FOUND)
        proxy.remove_toxic(toxic)
        return Response(204)
