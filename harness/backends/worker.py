"""Workload workers: client processes that run beside a cluster and report
on stdout, one JSON line per event (harness/workload/worker.py).

On the local backend a worker is a subprocess; on the docker backend a
container of the broker image on the cluster's network, so that its traffic
crosses the same network the faults act on.
"""
from __future__ import annotations

import abc
import subprocess
import sys
from pathlib import Path
from typing import Iterator


class Worker(abc.ABC):
    name: str

    @abc.abstractmethod
    def lines(self) -> Iterator[str]:
        """The worker's stdout, line by line, until it exits."""

    @abc.abstractmethod
    def terminate(self) -> None:
        """SIGTERM: the worker drains what it has in flight and exits."""

    @abc.abstractmethod
    def kill(self) -> None: ...

    @abc.abstractmethod
    def wait(self, timeout: float) -> int | None:
        """The exit status, or None if it is still running after `timeout`."""

    @abc.abstractmethod
    def stderr_text(self) -> str: ...


class LocalWorker(Worker):
    """A worker subprocess. Its stdin is a pipe nobody writes: if the harness
    dies the pipe closes, and a worker started with --stdin-stop stops."""

    def __init__(self, name: str, module_argv: list[str], log_path: Path):
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *module_argv], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1,
            start_new_session=True)

    def lines(self) -> Iterator[str]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            yield line.rstrip("\n")

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def wait(self, timeout: float) -> int | None:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._log.close()
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        return rc

    def stderr_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class DockerWorker(Worker):
    """A worker container; its stderr is saved to `log_path` once it exits."""

    def __init__(self, name: str, container, log_path: Path):
        self.name = name
        self.container = container
        self.log_path = log_path

    def lines(self) -> Iterator[str]:
        buf = b""
        for chunk in self.container.logs(stream=True, follow=True, stdout=True, stderr=False):
            buf += chunk
            *done, buf = buf.split(b"\n")
            for line in done:
                yield line.decode(errors="replace")
        if buf:
            yield buf.decode(errors="replace")

    def terminate(self) -> None:
        try:
            self.container.kill(signal="SIGTERM")
        except Exception:
            pass  # already exited

    def kill(self) -> None:
        try:
            self.container.kill()
        except Exception:
            pass

    def wait(self, timeout: float) -> int | None:
        try:
            rc = int(self.container.wait(timeout=timeout)["StatusCode"])
        except Exception:
            return None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text(self.stderr_text())
        return rc

    def stderr_text(self) -> str:
        try:
            return self.container.logs(stdout=False, stderr=True).decode(errors="replace")
        except Exception as e:
            return f"(no stderr: {e})"

    def remove(self) -> None:
        try:
            self.container.remove(force=True)
        except Exception:
            pass
