"""ZooKeeper from the harness's side: how to run a server, and how to tell
that ZooKeeper and the brokers registered in it are ready."""
from __future__ import annotations

import logging
import shutil
import socket
import time
from pathlib import Path

from harness.backends.base import ClusterError

# Debian's libzookeeper-java; the jar's manifest carries the rest of the classpath.
ZK_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-log4j12.jar",
           "/usr/share/java/log4j-1.2.jar")

LOG4J = """log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.Target=System.out
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} [myid:%X{myid}] %-5p [%t] %c{1}: %m%n
"""

# Kazoo logs every connection attempt at WARNING while a node is down; the
# harness polls on purpose, so keep its own probes quiet.
logging.getLogger("kazoo.client").setLevel(logging.ERROR)


def check_local_zookeeper_install() -> None:
    missing = [j for j in ZK_JARS if not Path(j).exists()]
    if missing or not shutil.which("java"):
        raise ClusterError(
            "the local backend needs Java and Debian's ZooKeeper jars "
            f"({'java' if not shutil.which('java') else ', '.join(missing)} missing): "
            "apt-get install -y openjdk-17-jre-headless libzookeeper-java "
            "liblog4j1.2-java libslf4j-java  (make setup does this)")


def zoo_cfg(data_dir: Path, client_port: int, tick_ms: int = 2000,
            servers: dict[int, tuple[str, int, int]] | None = None) -> str:
    lines = [f"tickTime={tick_ms}", "initLimit=10", "syncLimit=5", f"dataDir={data_dir}",
             f"clientPort={client_port}", "admin.enableServer=false",
             "4lw.commands.whitelist=*", "maxClientCnxns=0"]
    for sid, (host, peer, election) in sorted((servers or {}).items()):
        lines.append(f"server.{sid}={host}:{peer}:{election}")
    return "\n".join(lines) + "\n"


def java_command(conf_dir: Path) -> list[str]:
    return ["java", "-Xmx256m", f"-Dlog4j.configuration=file:{conf_dir}/log4j.properties",
            "-cp", ":".join([str(conf_dir), *ZK_JARS]),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(conf_dir / "zoo.cfg")]


def four_letter(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter word (srvr, ruok, ...) and return the answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            b = s.recv(4096)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks).decode(errors="replace")


def zk_mode(host: str, port: int) -> str | None:
    """'leader', 'follower' or 'standalone' when the server serves; None otherwise."""
    try:
        out = four_letter(host, port, "srvr")
    except OSError:
        return None
    for line in out.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def wait_zookeeper(servers: list[tuple[str, int]], timeout: float, describe=lambda: "") -> None:
    """Until every server answers `srvr` with a mode (an ensemble has elected a leader)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(zk_mode(h, p) for h, p in servers):
            return
        time.sleep(0.2)
    raise ClusterError(f"ZooKeeper did not start within {timeout:.0f}s. {describe()}")


def registered_brokers(connect: str, timeout: float = 10.0) -> set[int]:
    from kazoo.client import KazooClient
    zk = KazooClient(hosts=connect, timeout=timeout, connection_retry={"max_tries": 3})
    try:
        zk.start(timeout=timeout)
        if not zk.exists("/brokers/ids"):
            return set()
        return {int(c) for c in zk.get_children("/brokers/ids")}
    finally:
        zk.stop()
        zk.close()


def wait_registered(connect: str, broker_ids: set[int], timeout: float,
                    describe=lambda: "", alive=lambda: True) -> None:
    """Until every broker id in `broker_ids` has its ephemeral /brokers/ids node."""
    from kazoo.client import KazooClient
    if not broker_ids:
        return
    deadline = time.monotonic() + timeout
    zk = KazooClient(hosts=connect, timeout=10.0)
    try:
        zk.start(timeout=max(1.0, deadline - time.monotonic()))
        seen: set[int] = set()
        while time.monotonic() < deadline:
            if zk.exists("/brokers/ids"):
                seen = {int(c) for c in zk.get_children("/brokers/ids")}
                if broker_ids <= seen:
                    return
            if not alive():
                break
            time.sleep(0.2)
        missing = sorted(broker_ids - seen)
        raise ClusterError(f"brokers {missing} did not register in ZooKeeper within "
                           f"{timeout:.0f}s. {describe()}")
    except ClusterError:
        raise
    except Exception as e:
        raise ClusterError(f"cannot reach ZooKeeper at {connect}: {e}. {describe()}") from None
    finally:
        zk.stop()
        zk.close()


def wait_unregistered(connect: str, broker_id: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if broker_id not in registered_brokers(connect):
            return True
        time.sleep(0.2)
    return False
