"""harness.host: free loopback ports that an outgoing connection cannot take."""
import socket

from harness import host


def test_free_ports_sit_below_the_ephemeral_range_and_are_never_given_twice():
    low, _ = host.ephemeral_range()
    ports = [host.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(host.LOWEST_PORT <= p < max(low, host.LOWEST_PORT + 1000) for p in ports)
    with socket.socket() as s:  # what it hands out is bindable
        s.bind(("127.0.0.1", ports[-1]))


def test_a_port_something_listens_on_is_not_handed_out(monkeypatch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", host.free_port()))
        busy.listen()
        taken, other = busy.getsockname()[1], host.free_port()
        monkeypatch.setattr(host, "_given", set())
        picks = iter([taken, other])
        monkeypatch.setattr(host._pick, "randrange", lambda a, b: next(picks))
        assert host.free_port() == other


def test_ephemeral_range_reads_the_kernel_file_and_falls_back(tmp_path):
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert host.ephemeral_range(str(f)) == (40000, 50000)
    assert host.ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)
    f.write_text("garbage")
    assert host.ephemeral_range(str(f)) == (32768, 60999)
