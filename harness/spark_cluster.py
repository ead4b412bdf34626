"""A standalone Spark cluster on this machine, from the pyspark package itself.

The checker and the warehouse job run in local mode by default. A team with
a Spark cluster points them at it with --master spark://HOST:PORT; this
module starts one here (a master and N workers, each a JVM started with the
pyspark package's own `spark-class`, all on 127.0.0.1 with free ports) so
that path is tested for real, and so `chaoslog warehouse --standalone N`
can spread a big batch over worker JVMs.

    with StandaloneSpark(workers=2) as cluster:
        spark = get_spark(cluster.master_url)

Stopping kills the JVMs it started (also when start-up failed halfway).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from contracts.deadline import wait_until
from harness.host import free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# JVM start-up of a master and its workers on a loaded 2-core machine.
START_TIMEOUT_S = 120.0


class SparkClusterError(RuntimeError):
    """The cluster did not come up; the message says where its logs are."""


def spark_class() -> Path:
    import pyspark
    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.is_file():
        raise SparkClusterError(f"{path} is missing: the pyspark package is incomplete")
    return path


class StandaloneSpark:
    """A master and `workers` workers (each `cores` cores, `memory` for its
    executors: at least Spark's default executor memory, 1g) on 127.0.0.1."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g",
                 log_dir: Path | None = None) -> None:
        if workers < 1:
            raise ValueError("a standalone cluster needs at least one worker")
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="chaoslog-spark-cluster-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.ui_port = free_port()
        self.procs: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, cls: str, *args: str) -> None:
        # Executors run the Python of this process (the one with pyspark).
        # SPARK_LOCAL_IP keeps every JVM on loopback, the web UIs too (Spark
        # binds them to 0.0.0.0 without it); get_spark puts a driver for this
        # master on 127.0.0.1 as well (faults/proxy/README.md, "Control surfaces").
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
               "SPARK_WORKER_DIR": str(self.log_dir / f"{name}-work")}
        log = open(self.log_dir / f"{name}.log", "wb")
        self.procs.append(subprocess.Popen([str(spark_class()), cls, *args], stdout=log,
                                           stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True))
        log.close()

    def state(self) -> dict[str, Any]:
        """The master's own view (its web UI's JSON)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.loads(r.read())

    def alive_workers(self) -> int:
        try:
            return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")
        except OSError:
            return 0

    def start(self) -> "StandaloneSpark":
        try:
            self._start("master", MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                        "--webui-port", str(self.ui_port))
            for i in range(self.workers):
                self._start(f"worker-{i + 1}", WORKER_CLASS, "--host", "127.0.0.1",
                            "--cores", str(self.cores), "--memory", self.memory,
                            "--webui-port", str(free_port()), self.master_url)
            if not wait_until(lambda: self.alive_workers() >= self.workers, START_TIMEOUT_S, 0.5):
                raise SparkClusterError(
                    f"the standalone Spark cluster did not have {self.workers} live worker(s) "
                    f"within {START_TIMEOUT_S:g} s; logs in {self.log_dir}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 9)
                except ProcessLookupError:
                    pass
                p.wait(timeout=30)
        self.procs.clear()

    def __enter__(self) -> "StandaloneSpark":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
