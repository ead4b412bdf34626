"""Tests of the Toxiproxy-compatible proxy (faults/proxy).

Real sockets on 127.0.0.1 only, ports picked by the kernel.  The upstream is
a threaded echo server that records what it received and when.  Timing
assertions are bands around the expected value, wide enough for a loaded
2-core machine yet far from what the proxy does without the toxic; waits are
for conditions (data arrived, socket closed), never fixed sleeps.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from contextlib import closing

import pytest
import requests
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from faults.proxy import ListenError, ProxyServer
from faults.proxy import cli

IO_TIMEOUT = 5.0


# ------------------------------------------------------------------ helpers


def wait_until(predicate, timeout=IO_TIMEOUT, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        piece = sock.recv(size - len(data))
        if not piece:
            raise AssertionError(f"connection closed after {len(data)} of {size} bytes")
        data += piece
    return bytes(data)


def read_until_closed(sock: socket.socket) -> tuple[bytes, str]:
    """Everything until the peer closes: (data, "eof" or "reset")."""
    data = bytearray()
    try:
        while True:
            piece = sock.recv(65536)
            if not piece:
                return bytes(data), "eof"
            data += piece
    except ConnectionResetError:
        return bytes(data), "reset"


def round_trip(sock: socket.socket, payload: bytes = b"0123456789abcdef") -> float:
    start = time.monotonic()
    sock.sendall(payload)
    assert recv_exactly(sock, len(payload)) == payload
    return time.monotonic() - start


def median_rtt(sock: socket.socket, count: int = 7) -> float:
    return statistics.median(round_trip(sock) for _ in range(count))


def listen_port(listen: str) -> int:
    return int(listen.rsplit(":", 1)[1])


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT).close()
    except ConnectionRefusedError:
        return True
    return False


class EchoServer:
    """Threaded TCP echo server on 127.0.0.1 that records each read with its
    time, per connection, and lets a test close the server side."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.reads: list[list[tuple[float, bytes]]] = []
        self.eof: list[bool] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept_loop, daemon=True)]
        self._threads[0].start()

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            conn.settimeout(None)
            index = len(self.conns)
            self.reads.append([])
            self.eof.append(False)
            self.conns.append(conn)
            thread = threading.Thread(target=self._echo, args=(conn, index), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _echo(self, conn, index):
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    self.eof[index] = True
                    return
                self.reads[index].append((time.monotonic(), data))
                conn.sendall(data)
        except OSError:
            self.eof[index] = True
        finally:
            conn.close()

    def data(self, index: int = 0) -> bytes:
        return b"".join(d for _, d in list(self.reads[index]))

    def wait_connections(self, count: int) -> None:
        wait_until(lambda: len(self.conns) >= count, what=f"{count} upstream connection(s)")

    def close_connection(self, index: int) -> None:
        try:
            self.conns[index].shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self):
        self._stop.set()
        for index in range(len(self.conns)):
            self.close_connection(index)
        for thread in self._threads:
            thread.join(IO_TIMEOUT)
        self.sock.close()


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def server():
    proxy_server = ProxyServer(host="127.0.0.1", port=0).start_in_thread()
    yield proxy_server
    proxy_server.stop()


@pytest.fixture
def api(server):
    return f"http://127.0.0.1:{server.port}"


@pytest.fixture
def toxiproxy(server):
    """toxiproxy-python, unmodified, pointed at our server (its address is
    class-level state, restored afterwards)."""
    saved = (APIConsumer.host, APIConsumer.port)
    client = Toxiproxy()
    client.update_api_consumer("127.0.0.1", server.port)
    yield client
    APIConsumer.host, APIConsumer.port = saved


@pytest.fixture
def proxy_port(api, echo):
    """An enabled proxy "echo" in front of the echo server; its port."""
    response = requests.post(f"{api}/proxies", json={
        "name": "echo", "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{echo.port}"})
    assert response.status_code == 201, response.text
    return listen_port(response.json()["listen"])


def add_toxic(api: str, **body) -> dict:
    response = requests.post(f"{api}/proxies/echo/toxics", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def remove_toxic(api: str, name: str) -> None:
    response = requests.delete(f"{api}/proxies/echo/toxics/{name}")
    assert response.status_code == 204, response.text


# ------------------------------------------------- driven by toxiproxy-python


def test_toxiproxy_python_drives_the_whole_lifecycle(toxiproxy, echo):
    assert toxiproxy.running()
    assert b"version" in toxiproxy.version()

    proxy = toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="echo")
    port = listen_port(proxy.listen)
    assert proxy.enabled is True and port != 0  # the real bound port is reported
    assert list(toxiproxy.proxies()) == ["echo"]
    assert toxiproxy.get_proxy("echo").listen == proxy.listen
    with pytest.raises(ProxyExists):
        toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="echo")

    sock = connect(port)
    baseline = median_rtt(sock)

    proxy.add_toxic(type="latency", attributes={"latency": 100})
    toxics = proxy.toxics()
    assert list(toxics) == ["latency_downstream"]
    toxic = toxics["latency_downstream"]
    assert (toxic.type, toxic.stream, toxic.toxicity) == ("latency", "downstream", 1.0)
    assert toxic.attributes == {"latency": 100, "jitter": 0}

    # The toxic applies to the live connection and to new ones.
    assert 0.080 <= median_rtt(sock) - baseline <= 0.120
    with closing(connect(port)) as fresh:
        assert 0.080 <= median_rtt(fresh) - baseline <= 0.120

    proxy.disable()
    assert toxiproxy.get_proxy("echo").enabled is False
    assert read_until_closed(sock)[0] == b""  # live connection dropped
    sock.close()
    assert refused(port)

    proxy.enable()  # re-binds the same address; the toxic is still there
    sock = connect(port)
    assert round_trip(sock) >= 0.080

    assert proxy.destroy_toxic("latency_downstream") is True
    assert proxy.toxics() == {}
    assert median_rtt(sock) - baseline < 0.040

    proxy.add_toxic(type="latency", stream="upstream", name="lag",
                    attributes={"latency": 50})
    proxy.disable()
    assert toxiproxy.reset() is True
    reset_proxy = toxiproxy.get_proxy("echo")
    assert reset_proxy.enabled is True and reset_proxy.toxics() == {}

    assert toxiproxy.destroy(reset_proxy) is True
    assert toxiproxy.proxies() == {}
    assert refused(port)
    sock.close()


def test_toxiproxy_python_errors_map_to_its_exceptions(toxiproxy, echo):
    proxy = toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="echo")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="no_such_toxic")
    proxy.add_toxic(type="timeout", attributes={"timeout": 0})
    with pytest.raises(ProxyExists):
        proxy.add_toxic(type="timeout")
    with pytest.raises(NotFound):
        proxy.destroy_toxic("nope")
    with proxy.down():
        assert refused(listen_port(proxy.listen))
    assert toxiproxy.get_proxy("echo").enabled is True


# ------------------------------------------------------------ one per toxic


def test_latency_applies_per_direction(api, echo, proxy_port):
    with closing(connect(proxy_port)) as sock:
        baseline = median_rtt(sock, 5)

        add_toxic(api, type="latency", stream="upstream", attributes={"latency": 200})
        sent = time.monotonic()
        assert round_trip(sock) - baseline >= 0.170
        arrived = echo.reads[0][-1][0]
        assert arrived - sent >= 0.170  # the server saw the delay

        remove_toxic(api, "latency_upstream")
        add_toxic(api, type="latency", stream="downstream", attributes={"latency": 200})
        sent = time.monotonic()
        assert round_trip(sock) - baseline >= 0.170
        arrived = echo.reads[0][-1][0]
        assert arrived - sent < 0.100  # only the answer was delayed


def test_latency_jitter_stays_in_band_and_keeps_order(api, proxy_port):
    add_toxic(api, type="latency", attributes={"latency": 60, "jitter": 40})
    with closing(connect(proxy_port)) as sock:
        times = [round_trip(sock) for _ in range(6)]
        assert all(0.015 <= t <= 0.250 for t in times), times
        payload = os.urandom(50_000)
        for i in range(0, len(payload), 1000):  # 50 chunks, each with its own jitter
            sock.sendall(payload[i:i + 1000])
        assert recv_exactly(sock, len(payload)) == payload


def test_bandwidth_limits_rate(api, proxy_port):
    add_toxic(api, type="bandwidth", attributes={"rate": 200})  # KB/s, downstream
    payload = os.urandom(100 * 1024)
    with closing(connect(proxy_port)) as sock:
        start = time.monotonic()
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        received = recv_exactly(sock, len(payload))
        elapsed = time.monotonic() - start
        sender.join()
    assert received == payload
    assert 0.45 <= elapsed <= 1.2, elapsed  # 100 KB at 200 KB/s is 0.5 s


def test_slicer_delivers_in_delayed_slices(api, echo, proxy_port):
    add_toxic(api, type="slicer", stream="upstream",
              attributes={"average_size": 100, "size_variation": 20, "delay": 20_000})
    payload = os.urandom(1000)
    with closing(connect(proxy_port)) as sock:
        sock.sendall(payload)  # one write of 1000 bytes
        assert recv_exactly(sock, len(payload)) == payload
    reads = echo.reads[0]
    assert echo.data(0) == payload
    # About 10 slices 20 ms apart: the server must have seen several reads
    # spread over time (a read may merge slices if its thread was late).
    assert len(reads) >= 5, [len(d) for _, d in reads]
    assert reads[-1][0] - reads[0][0] >= 0.100
    assert min(len(d) for _, d in reads) <= 120


@pytest.mark.parametrize("stream", ["downstream", "upstream"])
def test_limit_data_closes_after_exactly_n_bytes(api, echo, proxy_port, stream):
    add_toxic(api, type="limit_data", stream=stream, attributes={"bytes": 1000})
    payload = os.urandom(3000)
    with closing(connect(proxy_port)) as sock:
        sock.sendall(payload)
        received, _how = read_until_closed(sock)
    if stream == "downstream":
        assert received == payload[:1000]
    else:
        echo.wait_connections(1)
        wait_until(lambda: echo.eof[0], what="upstream to see the close")
        assert echo.data(0) == payload[:1000]
        # Like Toxiproxy, reaching the limit closes the upstream socket
        # outright, so the echo may be cut short: only a prefix comes back.
        assert payload[:1000].startswith(received)


def test_reset_peer_resets_after_timeout(api, proxy_port):
    add_toxic(api, type="reset_peer", attributes={"timeout": 100})
    with closing(connect(proxy_port)) as sock:
        sock.sendall(b"ping")
        start = time.monotonic()
        with pytest.raises(ConnectionResetError):
            sock.recv(100)
        assert time.monotonic() - start >= 0.080


def test_timeout_stops_data_and_closes_after_timeout(api, echo, proxy_port):
    add_toxic(api, type="timeout", attributes={"timeout": 300})
    with closing(connect(proxy_port)) as sock:
        start = time.monotonic()
        sock.sendall(b"ping")
        received, _how = read_until_closed(sock)
        elapsed = time.monotonic() - start
    assert received == b""
    assert 0.25 <= elapsed <= 2.0, elapsed
    echo.wait_connections(1)
    wait_until(lambda: echo.data(0) == b"ping", what="ping upstream")  # upstream unaffected


def test_timeout_zero_holds_until_removed(api, proxy_port):
    add_toxic(api, type="timeout", attributes={"timeout": 0})
    with closing(connect(proxy_port)) as sock:
        sock.sendall(b"ping")
        sock.settimeout(0.4)
        with pytest.raises(socket.timeout):
            sock.recv(100)  # held: neither data nor close
        sock.settimeout(IO_TIMEOUT)
        # Removing it closes the connection (Toxiproxy's cleanup): the
        # dropped bytes must not be followed by later ones.
        remove_toxic(api, "timeout_downstream")
        assert read_until_closed(sock)[0] == b""


def test_slow_close_delays_the_close(api, echo, proxy_port):
    add_toxic(api, type="slow_close", attributes={"delay": 300})
    with closing(connect(proxy_port)) as sock:
        assert round_trip(sock) < 1.0  # connected through to the server
        echo.wait_connections(1)
        start = time.monotonic()
        echo.close_connection(0)
        received, _how = read_until_closed(sock)
        elapsed = time.monotonic() - start
    assert received == b""
    assert 0.25 <= elapsed <= 2.0, elapsed


def test_toxicity_zero_never_applies_and_update_rerolls(api, proxy_port):
    add_toxic(api, type="latency", toxicity=0.0, attributes={"latency": 300})
    for _ in range(5):
        with closing(connect(proxy_port)) as sock:
            assert round_trip(sock) < 0.150
    with closing(connect(proxy_port)) as sock:
        assert round_trip(sock) < 0.150
        response = requests.post(f"{api}/proxies/echo/toxics/latency_downstream",
                                 json={"toxicity": 1.0})
        assert response.status_code == 200
        assert response.json()["toxicity"] == 1.0
        assert response.json()["attributes"] == {"latency": 300, "jitter": 0}
        assert round_trip(sock) >= 0.250  # live link re-rolled on update


def test_toxic_edits_while_data_flows_lose_and_reorder_nothing(api, proxy_port):
    payload = os.urandom(300_000)
    with closing(connect(proxy_port)) as sock:
        received = {}

        def send():
            for i in range(0, len(payload), 1000):
                sock.sendall(payload[i:i + 1000])
                time.sleep(0.0005)

        def receive():
            received["data"] = recv_exactly(sock, len(payload))

        threads = [threading.Thread(target=send), threading.Thread(target=receive)]
        for thread in threads:
            thread.start()
        rounds = 0
        while threads[0].is_alive() or rounds < 2:
            for stream in ("upstream", "downstream"):
                add_toxic(api, name=f"lat_{stream}", type="latency", stream=stream,
                          attributes={"latency": 15, "jitter": 10})
                add_toxic(api, name=f"cut_{stream}", type="slicer", stream=stream,
                          attributes={"average_size": 300, "size_variation": 100,
                                      "delay": 200})
                add_toxic(api, name=f"bw_{stream}", type="bandwidth", stream=stream,
                          attributes={"rate": 3000})
            requests.post(f"{api}/proxies/echo/toxics/lat_upstream",
                          json={"attributes": {"latency": 5}})
            for name in ("cut", "lat", "bw"):
                for stream in ("upstream", "downstream"):
                    remove_toxic(api, f"{name}_{stream}")
            rounds += 1
        for thread in threads:
            thread.join(IO_TIMEOUT * 2)
    assert received.get("data") == payload


# ------------------------------------------------------------ HTTP API


def test_api_proxy_crud(api, echo):
    upstream = f"127.0.0.1:{echo.port}"
    response = requests.post(f"{api}/proxies", json={
        "name": "p", "listen": "127.0.0.1:0", "upstream": upstream, "enabled": False})
    assert response.status_code == 201
    assert response.json() == {"name": "p", "listen": "127.0.0.1:0", "upstream": upstream,
                               "enabled": False, "toxics": []}

    response = requests.patch(f"{api}/proxies/p", json={"enabled": True})
    assert response.status_code == 200
    body = response.json()
    assert body["enabled"] is True and listen_port(body["listen"]) != 0
    port = listen_port(body["listen"])
    with closing(connect(port)) as sock:
        assert round_trip(sock) < 1.0

    toxic = add_toxic_to(api, "p", type="latency", attributes={"latency": 5, "bogus": 1})
    assert toxic == {"attributes": {"latency": 5, "jitter": 0}, "name": "latency_downstream",
                     "type": "latency", "stream": "downstream", "toxicity": 1.0}
    response = requests.post(f"{api}/proxies/p/toxics/latency_downstream",
                             json={"attributes": {"jitter": 2}})
    assert response.json()["attributes"] == {"latency": 5, "jitter": 2}
    assert requests.get(f"{api}/proxies/p/toxics/latency_downstream").json() == response.json()
    assert requests.get(f"{api}/proxies/p").json()["toxics"] == [response.json()]

    # Moving the listen address frees the old port.
    with closing(socket.create_server(("127.0.0.1", 0))) as spare:
        new_port = spare.getsockname()[1]
    response = requests.post(f"{api}/proxies/p", json={"listen": f"127.0.0.1:{new_port}"})
    assert response.status_code == 200 and response.json()["listen"] == f"127.0.0.1:{new_port}"
    assert refused(port)
    with closing(connect(new_port)) as sock:
        assert round_trip(sock) < 1.0

    assert requests.delete(f"{api}/proxies/p").status_code == 204
    assert requests.get(f"{api}/proxies").json() == {}
    assert refused(new_port)


def add_toxic_to(api: str, proxy: str, **body) -> dict:
    response = requests.post(f"{api}/proxies/{proxy}/toxics", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def error_of(response: requests.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == status
    return body["error"]


def test_api_errors(api, echo, proxy_port):
    upstream = f"127.0.0.1:{echo.port}"
    assert error_of(requests.get(f"{api}/proxies/nope"), 404) == "proxy not found"
    assert error_of(requests.delete(f"{api}/proxies/nope"), 404) == "proxy not found"
    assert error_of(requests.get(f"{api}/proxies/nope/toxics"), 404) == "proxy not found"
    assert error_of(requests.get(f"{api}/proxies/echo/toxics/nope"), 404) == "toxic not found"
    assert error_of(requests.delete(f"{api}/proxies/echo/toxics/nope"), 404) == "toxic not found"

    create = f"{api}/proxies"
    assert error_of(requests.post(create, json={
        "name": "echo", "listen": "127.0.0.1:0", "upstream": upstream}), 409) == \
        "proxy already exists"
    assert "bad request body" in error_of(
        requests.post(create, data=b"{not json", headers={"Content-Type": "application/json"}),
        400)
    assert error_of(requests.post(create, json={"listen": "127.0.0.1:0", "upstream": upstream}),
                    400) == "missing required field: name"
    assert error_of(requests.post(create, json={"name": "x", "listen": "127.0.0.1:0"}),
                    400) == "missing required field: upstream"
    assert error_of(requests.post(create, json={"name": 5, "listen": "127.0.0.1:0",
                                                "upstream": upstream}), 400)
    error_of(requests.post(create, json={"name": "x", "listen": "nonsense",
                                         "upstream": upstream}), 400)
    error_of(requests.post(create, json={"name": "x", "listen": f"127.0.0.1:{proxy_port}",
                                         "upstream": upstream}), 400)  # in use
    assert "x" not in requests.get(create).json()

    toxics = f"{api}/proxies/echo/toxics"
    add_toxic(api, type="latency")
    assert error_of(requests.post(toxics, json={"type": "latency"}), 409) == \
        "toxic already exists"
    assert error_of(requests.post(toxics, json={"type": "nope"}), 400) == "invalid toxic type"
    assert "stream" in error_of(requests.post(toxics, json={"type": "latency",
                                                            "stream": "sideways"}), 400)
    error_of(requests.post(toxics, json={"name": "b", "type": "latency",
                                         "attributes": {"latency": "slow"}}), 400)
    error_of(requests.post(toxics, json={"name": "b", "type": "latency", "toxicity": 2}), 400)
    error_of(requests.post(toxics, data=b"[", headers={"Content-Type": "application/json"}), 400)
    error_of(requests.post(f"{toxics}/latency_downstream",
                           json={"attributes": {"latency": -1}}), 400)
    assert [t["name"] for t in requests.get(toxics).json()] == ["latency_downstream"]

    assert requests.get(f"{api}/nothing/here").status_code == 404
    assert requests.put(f"{api}/proxies").status_code == 405


def test_api_keep_alive_and_content_length(server):
    """Two pipelined requests on one connection, each answer framed by
    Content-Length, then Connection: close ends it."""
    request = b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    closing_request = b"GET /proxies HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    with closing(socket.create_connection(("127.0.0.1", server.port), timeout=IO_TIMEOUT)) as s:
        s.sendall(request + closing_request)
        stream = s.makefile("rb")
        bodies = []
        for _ in range(2):
            status = stream.readline()
            assert status.startswith(b"HTTP/1.1 200"), status
            headers = {}
            while (line := stream.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            bodies.append(stream.read(int(headers["content-length"])))
        assert json.loads(bodies[0])["version"]
        assert json.loads(bodies[1]) == {}
        assert stream.read() == b""  # closed after the second answer


def test_api_populate_creates_keeps_and_replaces(api, echo):
    upstream = f"127.0.0.1:{echo.port}"
    with closing(socket.create_server(("127.0.0.1", 0))) as spare:
        port = spare.getsockname()[1]
    entry = {"name": "pop", "listen": f"127.0.0.1:{port}", "upstream": upstream}
    response = requests.post(f"{api}/populate", json=[entry])
    assert response.status_code == 201
    assert [p["name"] for p in response.json()["proxies"]] == ["pop"]
    add_toxic_to(api, "pop", type="latency")

    # Same listen and upstream: kept, toxics included.
    response = requests.post(f"{api}/populate", json=[entry])
    assert response.status_code == 201
    assert len(response.json()["proxies"][0]["toxics"]) == 1

    # A different upstream: replaced by a fresh proxy.
    other = dict(entry, upstream="127.0.0.1:1")
    response = requests.post(f"{api}/populate", json=[other])
    assert response.json()["proxies"][0]["upstream"] == "127.0.0.1:1"
    assert response.json()["proxies"][0]["toxics"] == []

    error_of(requests.post(f"{api}/populate", json={"name": "x"}), 400)
    assert error_of(requests.post(f"{api}/populate", json=[{"name": "x"}]), 400) == \
        "missing required field: upstream at proxy 1"


# ------------------------------------------------------- server and CLI


def test_server_stop_closes_api_proxies_and_connections(echo):
    proxy_server = ProxyServer(port=0).start_in_thread()
    api = f"http://127.0.0.1:{proxy_server.port}"
    assert proxy_server.port != 0
    response = requests.post(f"{api}/proxies", json={
        "name": "echo", "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{echo.port}"})
    port = listen_port(response.json()["listen"])
    sock = connect(port)
    assert round_trip(sock) < 1.0
    proxy_server.stop()
    with closing(sock):
        assert read_until_closed(sock)[0] == b""
    assert refused(port)
    assert refused(proxy_server.port)


def test_cli_port_in_use_is_a_one_line_error(capsys):
    with closing(socket.create_server(("127.0.0.1", 0))) as busy:
        port = busy.getsockname()[1]
        assert cli.main(["--host", "127.0.0.1", "--port", str(port)]) == 2
        with pytest.raises(ListenError):
            ProxyServer(port=port).start_in_thread()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(port) in err and "cannot listen" in err


def test_cli_add_parser_registers_proxy_subcommand():
    parser = argparse.ArgumentParser(prog="chaoslog")
    cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["proxy", "--port", "0"])
    assert args.func is cli.run and args.host == "127.0.0.1" and args.port == 0
    assert parser.parse_args(["proxy"]).port == 8474


def test_python_m_faults_proxy_serves_until_sigterm():
    process = subprocess.Popen(
        [sys.executable, "-m", "faults.proxy", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, line + process.stderr.read()
        url = line.split("listening on ", 1)[1].strip()
        assert requests.get(f"{url}/version", timeout=IO_TIMEOUT).status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(IO_TIMEOUT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"},
                                     {"Origin": "null"},
                                     {"Host": "rebound.example:8474"}])
def test_requests_a_web_page_makes_are_refused(api, headers):
    response = requests.post(f"{api}/proxies", json={
        "name": "web", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9"}, headers=headers)
    assert response.status_code == 403, response.text
    assert requests.get(f"{api}/proxies").json() == {}    # nothing was made


def test_clients_naming_an_address_or_localhost_are_served(api):
    port = api.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "[::1]:8474", "172.18.0.5"):
        assert requests.get(f"{api}/proxies", headers={"Host": host}).status_code == 200, host
