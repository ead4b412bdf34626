"""Start a real ZooKeeper 3.8 (Debian's libzookeeper-java) as a java
subprocess for tests and benchmarks (environment.md, "Images with no registry")."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

CLASSPATH = ["/usr/share/java/zookeeper.jar", "/usr/share/java/zookeeper-jute.jar",
             "/usr/share/java/slf4j-api.jar", "/usr/share/java/slf4j-log4j12.jar",
             "/usr/share/java/log4j-1.2.jar", "/usr/share/java/netty-handler.jar",
             "/usr/share/java/netty-transport.jar", "/usr/share/java/netty-common.jar",
             "/usr/share/java/netty-buffer.jar", "/usr/share/java/netty-codec.jar",
             "/usr/share/java/netty-resolver.jar",
             "/usr/share/java/netty-transport-native-epoll.jar",
             "/usr/share/java/netty-transport-native-unix-common.jar",
             "/usr/share/java/metrics-core.jar", "/usr/share/java/commons-cli.jar",
             "/usr/share/java/commons-io.jar", "/usr/share/java/snappy-java.jar"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ZooKeeperServer:
    def __init__(self, tick_ms: int = 500) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="chaoslog-zk-"))
        self.port = free_port()
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "ZooKeeperServer":
        conf = self.dir / "conf"
        data = self.dir / "data"
        conf.mkdir(exist_ok=True)
        data.mkdir(exist_ok=True)
        (conf / "zoo.cfg").write_text(
            f"tickTime={self.tick_ms}\ndataDir={data}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=*\nmaxClientCnxns=0\n"
            # short sessions are allowed (min 2 x tick) so tests can expire fast
            "minSessionTimeout=1000\nforceSync=no\njute.maxbuffer=4194304\n")
        (conf / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
            f"log4j.appender.F.File={self.dir}/zookeeper.log\n"
            "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.F.layout.ConversionPattern=%d %p [%t] %c: %m%n\n")
        cp = ":".join([str(conf)] + [j for j in CLASSPATH if os.path.exists(j)])
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Djute.maxbuffer=4194304",
             f"-Dlog4j.configuration=file:{conf}/log4j.properties", "-cp", cp,
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(conf / "zoo.cfg")],
            stdout=subprocess.DEVNULL, stderr=open(self.dir / "stderr.log", "wb"),
            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited: {(self.dir / 'stderr.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"ruok")
                    if s.recv(4) == b"imok":
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("ZooKeeper did not start in time")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
