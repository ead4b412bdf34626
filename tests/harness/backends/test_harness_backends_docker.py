"""harness/backends/docker.py's pause: what it does when the cgroup freezer
gives up (a container object that fails as docker's does; the real pause is
covered by tests/faults/injectors/test_faults_injectors_docker.py)."""
from __future__ import annotations

import pytest
from docker.errors import APIError

from harness.backends import docker as backend
from harness.backends.base import ClusterError

FREEZE_FAILED = "500 Server Error: Internal Server Error (\"cannot pause container: unable to freeze\")"


class _Container:
    status = "running"

    def __init__(self, failures: int, message: str = FREEZE_FAILED):
        self.failures, self.message, self.tries = failures, message, 0

    def pause(self):
        self.tries += 1
        if self.tries <= self.failures:
            raise APIError(self.message)


def _cluster(container) -> backend.DockerCluster:
    c = backend.DockerCluster.__new__(backend.DockerCluster)
    c._get = lambda name: container
    return c


def test_a_pause_the_freezer_gave_up_on_is_tried_again():
    container = _Container(failures=2)
    _cluster(container).pause_node("broker-1")
    assert container.tries == 3


def test_a_freezer_that_keeps_failing_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(backend, "PAUSE_RETRY_S", 1.0)
    with pytest.raises(ClusterError, match=r"could not freeze broker-1's processes within 1 s "
                                           r"\(.*unable to freeze.*\); is the machine overloaded"):
        _cluster(_Container(failures=10**6)).pause_node("broker-1")


def test_other_docker_errors_are_not_tried_again():
    container = _Container(failures=1, message="409 Client Error: Container is not running")
    with pytest.raises(APIError):
        _cluster(container).pause_node("broker-1")
    assert container.tries == 1


def test_the_proxy_container_binds_its_interfaces_explicitly():
    """Inside its container the proxy must listen on the container's interface
    (brokers in other containers reach it there): 0.0.0.0, allowed by the
    flag, with the reason its warning gives (faults/proxy/README.md)."""
    import argparse

    from faults.proxy import cli
    command = backend.proxy_command()
    assert command[:3] == ["python", "-m", "faults.proxy"]
    parser = argparse.ArgumentParser()
    cli._add_arguments(parser)
    args = parser.parse_args(command[3:])
    assert args.host == "0.0.0.0" and args.port == backend.PROXY_API_PORT
    assert args.allow_non_loopback and "container" in args.bind_reason
