"""Finds and removes what killed chaoslog processes left behind.

testcontainers' own reaper (Ryuk) needs an image that cannot be pulled here.
Instead every container and network chaoslog starts carries labels naming
the process that owns it (pid plus that process's start time, so a reused
pid is not mistaken for the owner). At the next start, anything whose owner
is gone is removed. Clusters brought up by `chaoslog cluster up` are marked
persistent: they outlive the CLI process on purpose and are removed only by
`chaoslog cluster down`.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness.host import state_dir

PREFIX = "org.chaoslog"
CLUSTER_LABEL = f"{PREFIX}.cluster"
OWNER_LABEL = f"{PREFIX}.owner"
PERSISTENT_LABEL = f"{PREFIX}.persistent"
BASE_DIR_LABEL = f"{PREFIX}.base-dir"
NODE_LABEL = f"{PREFIX}.node"


def _stat(pid: int, field: int) -> str | None:
    """Field `field` of /proc/<pid>/stat, counted after the command name
    (0: state, 1: parent pid, 19: start time); None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[field]
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> str | None:
    return _stat(pid, 19)


def owner_token(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    return f"{pid}:{_start_time(pid)}"


def owner_alive(token: str) -> bool:
    try:
        pid_s, start = token.split(":", 1)
        return _start_time(int(pid_s)) == start
    except ValueError:
        return False


def labels(cluster: str, base_dir: Path, persistent: bool) -> dict[str, str]:
    return {PREFIX: "true", CLUSTER_LABEL: cluster, OWNER_LABEL: owner_token(),
            PERSISTENT_LABEL: str(persistent).lower(), BASE_DIR_LABEL: str(base_dir)}


def _kept(cluster: str | None) -> bool:
    """A cluster that `--chaoslog-keep` or `chaoslog cluster up` recorded as persistent."""
    import json
    if not cluster:
        return False
    try:
        return bool(json.loads((state_dir() / f"{cluster}.json").read_text()).get("persistent"))
    except (OSError, ValueError):
        return False


def orphaned(lbls: dict[str, str]) -> bool:
    if lbls.get(PERSISTENT_LABEL) == "true" or _kept(lbls.get(CLUSTER_LABEL)):
        return False
    return not owner_alive(lbls.get(OWNER_LABEL, ""))


def reap_docker(client=None) -> list[str]:
    """Remove chaoslog containers and networks whose owner process is gone."""
    if client is None:
        from harness.docker_engine import docker_client
        client = docker_client()
    removed = []
    for c in client.containers.list(all=True, filters={"label": PREFIX}):
        if orphaned(c.labels):
            try:
                c.remove(force=True, v=True)
                removed.append(f"container {c.name}")
            except Exception:
                pass
            base = c.labels.get(BASE_DIR_LABEL)
            if base and Path(base).name.startswith("chaoslog-"):
                shutil.rmtree(base, ignore_errors=True)
    for n in client.networks.list(filters={"label": PREFIX}):
        if orphaned(n.attrs.get("Labels") or {}):
            try:
                n.remove()
                removed.append(f"network {n.name}")
            except Exception:
                pass
    return removed


def reap_local() -> list[str]:
    """Kill local processes (a local-backend cluster's, an external
    cluster's proxy) whose cluster's owner process is gone."""
    import json
    from harness.backends.process import LocalProcess
    removed = []
    for path in sorted(state_dir().glob("*.json")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        # local clusters, and the proxy of an external cluster's clients
        if state.get("backend") not in ("local", "external") or state.get("persistent"):
            continue
        owner = state.get("owner")
        if owner and owner_alive(owner):
            continue
        procs = [LocalProcess.from_json(p) for p in state.get("procs", {}).values()]
        if state.get("proxy"):
            procs.append(LocalProcess.from_json(state["proxy"]))
        for p in procs:
            if p.running():
                p.kill()
                removed.append(f"process {p.name} ({p.pid})")
        base = state.get("base_dir")
        if base and Path(base).name.startswith("chaoslog-"):
            shutil.rmtree(base, ignore_errors=True)
        path.unlink(missing_ok=True)
    return removed


def reap_checker_jvms() -> list[str]:
    """Kill Spark checker JVMs whose Python driver is gone.

    get_spark marks the JVM it starts with the pid of the Python process that
    started it, and that process is the JVM's parent. After a kill of that
    process the JVM is re-parented, so "parent is not the marked pid" says
    orphan even when the pid has been reused.
    """
    import signal
    from reports.spark_checker import DRIVER_MARK
    removed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        marks = [a for a in args if a.startswith(DRIVER_MARK.encode())]
        if not marks:
            continue
        pid, driver = int(entry.name), marks[0][len(DRIVER_MARK):].decode()
        if _stat(pid, 1) == driver:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            removed.append(f"process spark-checker-jvm ({pid})")
        except OSError:
            pass
    return removed


def reap_orphans(docker: bool = True) -> list[str]:
    """Everything whose owner process is gone, of the local backend and (with
    `docker`) of the Docker backend (no engine: nothing of ours can be left
    there)."""
    removed = reap_local() + reap_checker_jvms()
    if docker:
        try:
            removed += reap_docker()
        except Exception:  # noqa: BLE001 - no engine, or it did not answer
            pass
    return removed
