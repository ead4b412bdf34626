"""Real broker processes (`python -m cluster.broker CONFIG`) for the
controller's end-to-end tests."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kazoo.client import KazooClient

from cluster import zkpaths
from cluster.config import render_properties
from controller_fakes import wait_until
from harness.host import free_port

REPO = Path(__file__).resolve().parents[3]


class BrokerProc:
    def __init__(self, broker_id: int, zk_hosts: str, base: Path, **overrides) -> None:
        self.id = broker_id
        self.port = free_port()
        self.dir = base / f"broker-{broker_id}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.dir / "logs"
        self.config = {"broker.id": broker_id, "host.name": "127.0.0.1", "port": self.port,
                       "advertised.host.name": "127.0.0.1", "zookeeper.connect": zk_hosts,
                       "log.dirs": str(self.log_dir), "zookeeper.session.timeout.ms": 3000,
                       "controlled.shutdown.enable": True,
                       "controlled.shutdown.retry.backoff.ms": 300,
                       "replica.lag.time.max.ms": 3000,
                       "replica.high.watermark.checkpoint.interval.ms": 500, **overrides}
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "BrokerProc":
        self.starts += 1
        (self.dir / "broker.properties").write_text(render_properties(self.config))
        self.proc = subprocess.Popen([sys.executable, "-m", "cluster.broker",
                                      str(self.dir / "broker.properties")], cwd=REPO,
                                     stdout=subprocess.DEVNULL,
                                     stderr=open(self.dir / "stderr.log", "ab"),
                                     start_new_session=True)
        return self

    def wait_registered(self, zk: KazooClient, timeout: float = 30) -> "BrokerProc":
        def ok():
            assert self.proc.poll() is None, self.stderr()[-3000:]
            try:
                reg = zkpaths.BrokerRegistration.decode(self.id, zk.get(zkpaths.broker_path(self.id))[0])
            except Exception:
                return False
            return reg.start_epoch >= self.starts
        wait_until(ok, timeout, what=f"broker {self.id} registered")
        return self

    def stderr(self) -> str:
        try:
            return (self.dir / "stderr.log").read_text(errors="replace")
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def terminate(self, timeout: float = 60) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode
