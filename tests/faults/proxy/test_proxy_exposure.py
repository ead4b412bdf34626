"""Where the proxy may listen (faults/proxy/exposure.py): loopback by default,
elsewhere only with --allow-non-loopback, and then with a warning.

Non-loopback binds use the wildcard address 0.0.0.0 (every machine has it);
connections still go to 127.0.0.1, which 0.0.0.0 includes.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
from contextlib import closing

import pytest
import requests

from faults.proxy import ListenError, ProxyServer, cli
from faults.proxy.exposure import Exposure, is_loopback, resolves_to_loopback

IO_TIMEOUT = 5.0


def started(**kwargs) -> ProxyServer:
    return ProxyServer(port=0, **kwargs).start_in_thread()


def api_of(server: ProxyServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


# ------------------------------------------------------------- the policy


@pytest.mark.parametrize("host,loopback", [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("0.0.0.0", False), ("::", False), ("", False), ("10.0.0.1", False),
    ("fe80::1%lo", False), ("localhost", False),   # a name is not an address
])
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback


def test_names_are_judged_by_what_they_resolve_to():
    assert resolves_to_loopback("localhost") is True
    assert resolves_to_loopback("127.0.0.1") is True
    assert resolves_to_loopback("0.0.0.0") is False
    assert resolves_to_loopback("") is False            # every interface
    assert resolves_to_loopback("no-such-host.invalid") is None


def test_a_reason_needs_the_permission():
    with pytest.raises(ValueError):
        Exposure(reason="why")


# ----------------------------------------------------------------- defaults


def test_the_defaults_are_loopback():
    parser = argparse.ArgumentParser(prog="chaoslog")
    cli.add_parser(parser.add_subparsers(dest="command"))
    parsed = parser.parse_args(["proxy"])
    assert parsed.host == "127.0.0.1" and parsed.allow_non_loopback is False
    server = ProxyServer()
    assert server.host == "127.0.0.1" and server.exposure.allow_non_loopback is False


def test_loopback_binds_work_and_say_nothing(capsys):
    server = started()
    try:
        for listen in ("127.0.0.1:0", "localhost:0"):
            name = listen.split(":")[0]
            r = requests.post(f"{api_of(server)}/proxies", timeout=IO_TIMEOUT, json={
                "name": name, "listen": listen, "upstream": "127.0.0.1:1"})
            assert r.status_code == 201, r.text
            assert is_loopback(r.json()["listen"].rsplit(":", 1)[0].strip("[]"))
    finally:
        server.stop()
    assert capsys.readouterr().err == ""


# ------------------------------------------------ refused without the flag


@pytest.mark.parametrize("host", ["0.0.0.0", ""])
def test_the_cli_refuses_a_non_loopback_api_in_one_line(capsys, host):
    assert cli.main(["--host", host, "--port", "0"]) == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith("chaoslog proxy: cannot listen on ")
    assert "not a loopback address" in err and "inject faults" in err
    assert "--allow-non-loopback" in err


def test_the_server_refuses_a_non_loopback_api():
    with pytest.raises(ListenError, match="not a loopback address.*--allow-non-loopback"):
        ProxyServer(host="0.0.0.0", port=0).start_in_thread()


def test_a_bind_reason_without_the_flag_is_refused(capsys):
    assert cli.main(["--port", "0", "--bind-reason", "why"]) == 2
    assert "--allow-non-loopback" in one_line(capsys.readouterr().err)


def test_the_api_refuses_non_loopback_proxy_listeners(capsys):
    server = started()
    api = api_of(server)
    try:
        for listen in ("0.0.0.0:0", ":0"):
            r = requests.post(f"{api}/proxies", timeout=IO_TIMEOUT, json={
                "name": "p", "listen": listen, "upstream": "127.0.0.1:1"})
            assert r.status_code == 400
            error = r.json()["error"]
            assert "not a loopback address" in error and "--allow-non-loopback" in error
        r = requests.post(f"{api}/populate", timeout=IO_TIMEOUT, json=[
            {"name": "p", "listen": "0.0.0.0:0", "upstream": "127.0.0.1:1"}])
        assert r.status_code == 400 and "not a loopback address" in r.json()["error"]
        assert requests.get(f"{api}/proxies", timeout=IO_TIMEOUT).json() == {}
        # Nor can a loopback proxy be moved elsewhere.
        requests.post(f"{api}/proxies", timeout=IO_TIMEOUT, json={
            "name": "q", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"})
        r = requests.post(f"{api}/proxies/q", timeout=IO_TIMEOUT, json={"listen": "0.0.0.0:0"})
        assert r.status_code == 400 and "not a loopback address" in r.json()["error"]
    finally:
        server.stop()
    assert capsys.readouterr().err == ""


# ------------------------------------------------ with the flag: bound, warned


def test_with_the_flag_everything_binds_and_each_kind_warns_once():
    lines: list[str] = []
    server = ProxyServer(host="0.0.0.0", port=0, exposure=Exposure(
        allow_non_loopback=True, reason="a test", warn=lines.append)).start_in_thread()
    try:
        assert len(lines) == 1
        assert f"API listens on 0.0.0.0:{server.port}" in lines[0]
        assert "inject faults" in lines[0] and "a test" in lines[0]
        with closing(socket.create_server(("127.0.0.1", 0))) as upstream:
            upstream_port = upstream.getsockname()[1]
            ports = []
            for name in ("first", "second"):
                r = requests.post(f"{api_of(server)}/proxies", timeout=IO_TIMEOUT, json={
                    "name": name, "listen": "0.0.0.0:0",
                    "upstream": f"127.0.0.1:{upstream_port}"})
                assert r.status_code == 201, r.text
                assert r.json()["listen"].startswith("0.0.0.0:")
                ports.append(int(r.json()["listen"].rsplit(":", 1)[1]))
            assert len(lines) == 2   # one line for the proxies' address, not one per proxy
            assert "proxy listeners bind 0.0.0.0" in lines[1] and "first" in lines[1]
            assert "upstreams" in lines[1] and "a test" in lines[1]
            with closing(socket.create_connection(("127.0.0.1", ports[0]), IO_TIMEOUT)) as c:
                c.sendall(b"ping")
                upstream.settimeout(IO_TIMEOUT)
                conn, _ = upstream.accept()
                with closing(conn):
                    conn.settimeout(IO_TIMEOUT)
                    assert conn.recv(4) == b"ping"
    finally:
        server.stop()


def test_the_cli_with_the_flag_serves_and_warns_in_one_stderr_line():
    process = subprocess.Popen(
        [sys.executable, "-m", "faults.proxy", "--host", "0.0.0.0", "--port", "0",
         "--allow-non-loopback", "--bind-reason", "in a test"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert "listening on http://0.0.0.0:" in line, line + process.stderr.read()
        port = int(line.rsplit(":", 1)[1])
        assert requests.get(f"http://127.0.0.1:{port}/version", timeout=IO_TIMEOUT).ok
        process.send_signal(signal.SIGTERM)
        assert process.wait(IO_TIMEOUT) == 0
        err = one_line(process.stderr.read())
        assert err.startswith("chaoslog proxy: WARNING: ")
        assert f"0.0.0.0:{port}" in err and "inject faults" in err and "in a test" in err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()
