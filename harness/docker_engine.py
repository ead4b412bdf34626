"""Access to the Docker engine, with an error that says what to do when there is none."""
from __future__ import annotations

import os

from harness.backends.base import ClusterError

# Ryuk, testcontainers' reaper, needs an image that cannot be pulled here;
# chaoslog reaps its own resources by label instead (harness/reaper.py).
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

_client = None


class DockerUnavailable(ClusterError):
    pass


def docker_client():
    """A docker-py client for the local engine; DockerUnavailable if none answers."""
    global _client
    if _client is not None:
        return _client
    try:
        import docker
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as e:  # DockerException, connection refused, missing socket
        raise DockerUnavailable(
            "no Docker engine answers "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'}). "
            "Start one (`systemctl start docker` or `dockerd &`), or use the local backend: "
            "--backend local") from None
    _client = client
    return client


def engine_available() -> bool:
    try:
        docker_client()
        return True
    except DockerUnavailable:
        return False
