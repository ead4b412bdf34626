"""Backends: where a cluster's nodes run. `make_cluster` picks one (docker,
local; tansu, the second broker, in docker; external: a cluster the harness
did not start, reached through its bootstrap addresses); `attach` finds a cluster that `chaoslog cluster up`
brought up in another process."""
from __future__ import annotations

import json

from harness.backends.base import Cluster, ClusterError, ClusterSpec

BACKENDS = ("docker", "local")


def default_backend() -> str:
    """docker when an engine answers, local otherwise."""
    from harness.docker_engine import engine_available
    return "docker" if engine_available() else "local"


def make_cluster(spec: ClusterSpec, backend: str | None = None, persistent: bool = False) -> Cluster:
    """A Cluster object, not started yet. An unknown backend or a docker backend
    without an engine is a ClusterError that says what to do."""
    backend = backend or default_backend()
    if backend == "docker":
        from harness.backends.docker import DockerCluster
        return DockerCluster(spec, persistent=persistent)
    if backend == "local":
        from harness.backends.local import LocalCluster
        return LocalCluster(spec, persistent=persistent)
    if backend == "external":
        from harness.backends.external import ExternalCluster, ExternalSpec
        if not isinstance(spec, ExternalSpec):
            raise ClusterError("an external cluster needs its bootstrap addresses "
                               "(chaoslog run --target external --bootstrap HOST:PORT,...)")
        return ExternalCluster(spec)
    if backend == "tansu":
        from harness.backends.tansu import TansuCluster, TansuSpec
        if not isinstance(spec, TansuSpec):
            raise ClusterError("a tansu cluster is made from a TansuSpec (chaoslog run "
                               "--target tansu)")
        return TansuCluster(spec)
    raise ClusterError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")


def spec_from_json(backend: str, d: dict) -> ClusterSpec:
    """The cluster spec a run's spec keeps (RunSpec.to_json), of the class
    its backend takes. TypeError or ClusterError when it does not fit."""
    if backend == "external":
        from harness.backends.external import ExternalSpec
        return ExternalSpec(**d)
    if backend == "tansu":
        from harness.backends.tansu import TansuSpec
        return TansuSpec(**d)
    return ClusterSpec(**d)


def registered(name: str) -> dict | None:
    from harness.host import state_dir
    path = state_dir() / f"{name}.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise ClusterError(f"the state file {path} is damaged; remove it and any "
                           "leftover processes or containers of that cluster") from None


def attach(name: str) -> Cluster:
    state = registered(name)
    if state is None:
        raise ClusterError(f"no cluster named {name!r} is up (start one with "
                           f"`chaoslog cluster up --name {name}`)")
    if state["backend"] == "docker":
        from harness.backends.docker import DockerCluster
        return DockerCluster.load(state)
    from harness.backends.local import LocalCluster
    return LocalCluster.load(state)
