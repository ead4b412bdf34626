"""ZooKeeper from the harness's side: how to run a server, and how to tell
that ZooKeeper and the brokers registered in it are ready.

The backends run ZooKeeper as nodes of a cluster; StandaloneZooKeeper is one
server on its own, for the tests and benchmarks that need a real ZooKeeper
but no cluster (controller and broker tests, bench/bench_controller.py)."""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from cluster import zkpaths
from contracts.deadline import Deadline, wait_until
from harness.backends.base import ClusterError
from harness.host import free_port
from harness.zk_probe import four_letter, zk_mode

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


def log4j_to_file(log_file: Path, level: str = "WARN") -> str:
    """log4j.properties that sends ZooKeeper's log to one file (LOG4J goes to
    the console, which the backends capture)."""
    return (f"log4j.rootLogger={level}, F\n"
            "log4j.appender.F=org.apache.log4j.FileAppender\n"
            f"log4j.appender.F.File={log_file}\n"
            "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.F.layout.ConversionPattern=%d %p [%t] %c: %m%n\n")


def zoo_cfg(data_dir: Path, client_port: int, tick_ms: int = 2000,
            servers: dict[int, tuple[str, int, int]] | None = None,
            extra: dict[str, object] | None = None, client_address: str = "127.0.0.1") -> str:
    """zoo.cfg; `extra` adds settings (key=value lines) after the common ones.
    A ZooKeeper on this machine listens on loopback only: the client port on
    `client_address` (ZooKeeper's default is every interface), the ensemble
    ports on the servers' addresses (127.0.0.1 in the local backend), no
    admin server (Jetty on every interface, port 8080, by default)."""
    lines = [f"tickTime={tick_ms}", "initLimit=10", "syncLimit=5", f"dataDir={data_dir}",
             f"clientPort={client_port}", f"clientPortAddress={client_address}",
             "admin.enableServer=false",
             "4lw.commands.whitelist=*", "maxClientCnxns=0"]
    lines += [f"{k}={v}" for k, v in (extra or {}).items()]
    for sid, (host, peer, election) in sorted((servers or {}).items()):
        lines.append(f"server.{sid}={host}:{peer}:{election}")
    return "\n".join(lines) + "\n"


def java_command(conf_dir: Path, heap_mb: int = 256, jvm_opts: Sequence[str] = ()) -> list[str]:
    """The command that runs the server configured in conf_dir (zoo.cfg and
    log4j.properties); jvm_opts go after the heap size."""
    return ["java", f"-Xmx{heap_mb}m", *jvm_opts,
            f"-Dlog4j.configuration=file:{conf_dir}/log4j.properties",
            "-cp", ":".join([str(conf_dir), *ZK_JARS]),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(conf_dir / "zoo.cfg")]


def wait_zookeeper(servers: list[tuple[str, int]], timeout: float, describe=lambda: "") -> None:
    """Until every server answers `srvr` with a mode (an ensemble has elected a leader)."""
    if not wait_until(lambda: all(zk_mode(h, p) for h, p in servers), timeout):
        raise ClusterError(f"ZooKeeper did not start within {timeout:.0f}s. {describe()}")


def registered_brokers(connect: str, timeout: float = 10.0) -> set[int]:
    from kazoo.client import KazooClient
    zk = KazooClient(hosts=connect, timeout=timeout, connection_retry={"max_tries": 3})
    try:
        zk.start(timeout=timeout)
        if not zk.exists(zkpaths.BROKER_IDS):
            return set()
        return {int(c) for c in zk.get_children(zkpaths.BROKER_IDS)}
    finally:
        zk.stop()
        zk.close()


def wait_registered(connect: str, broker_ids: set[int], timeout: float,
                    describe=lambda: "", alive=lambda: True) -> None:
    """Until every broker id in `broker_ids` has its ephemeral /brokers/ids node."""
    from kazoo.client import KazooClient
    if not broker_ids:
        return
    deadline = Deadline(timeout)
    zk = KazooClient(hosts=connect, timeout=10.0)
    try:
        zk.start(timeout=max(1.0, deadline.remaining()))
        seen: set[int] = set()

        def done() -> bool:
            nonlocal seen
            if zk.exists(zkpaths.BROKER_IDS):
                seen = {int(c) for c in zk.get_children(zkpaths.BROKER_IDS)}
            return broker_ids <= seen or not alive()

        wait_until(done, deadline.remaining())
        if broker_ids <= seen:
            return
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


# ------------------------------------------------------- a standalone server

# A JVM that starts fast (serial GC, C1 only): tests start one per session
# and never load ZooKeeper enough for the full JIT to pay off.
QUICK_JVM = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")

# 4 MiB packets (default 1 MiB) for large multi transactions: the
# controller's batched leaderAndISR writes, the benchmark's populate.
JUTE_MAXBUFFER = 4 * 1024 * 1024


class StandaloneZooKeeper:
    """One ZooKeeper server on 127.0.0.1, outside any harness cluster.

    Sessions may be as short as 1 s (minSessionTimeout) so that tests can
    make one expire quickly. fsync is off unless asked for: tests need no
    durability, a benchmark that compares with a deployed ZooKeeper does.
    Without `base_dir` the server works in a temporary directory that stop()
    removes; a given `base_dir` is kept (its logs outlive the server)."""

    def __init__(self, base_dir: Path | None = None, *, tick_ms: int = 500,
                 fsync: bool = False, heap_mb: int = 256,
                 jvm_opts: Sequence[str] = QUICK_JVM,
                 preexec_fn: Callable[[], None] | None = None) -> None:
        self._owns_dir = base_dir is None
        self.dir = Path(tempfile.mkdtemp(prefix="chaoslog-zk-")) if base_dir is None else base_dir
        self.port = free_port()
        self.tick_ms = tick_ms
        self.fsync = fsync
        self.heap_mb = heap_mb
        self.jvm_opts = tuple(jvm_opts)
        self.preexec_fn = preexec_fn
        self.proc: subprocess.Popen | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "StandaloneZooKeeper":
        """Start the server; returns once it answers `ruok`."""
        conf, data = self.dir / "conf", self.dir / "data"
        conf.mkdir(parents=True, exist_ok=True)
        data.mkdir(exist_ok=True)
        (conf / "zoo.cfg").write_text(zoo_cfg(data, self.port, self.tick_ms, extra={
            "minSessionTimeout": 1000,
            "forceSync": "yes" if self.fsync else "no", "jute.maxbuffer": JUTE_MAXBUFFER}))
        (conf / "log4j.properties").write_text(log4j_to_file(self.dir / "zookeeper.log"))
        stderr = self.dir / "stderr.log"
        with open(stderr, "wb") as err:
            self.proc = subprocess.Popen(
                java_command(conf, self.heap_mb,
                             [*self.jvm_opts, f"-Djute.maxbuffer={JUTE_MAXBUFFER}"]),
                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                preexec_fn=self.preexec_fn)
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise ClusterError(f"ZooKeeper exited: {stderr.read_text()[-2000:]}")
            return four_letter("127.0.0.1", self.port, "ruok", timeout=1) == "imok"

        if wait_until(ready, timeout, 0.1, retry_on=(OSError,)):
            return self
        self.stop()
        raise ClusterError(f"ZooKeeper did not start within {timeout:.0f}s")

    def stop(self) -> None:
        """Kill the server (no clean shutdown is needed) and remove its
        directory if it made one."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        if self._owns_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
