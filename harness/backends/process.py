"""A local OS process that can be started, signalled, frozen and restarted,
and found again by pid from another chaoslog process (the CLI's `cluster`
commands run in separate processes)."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from contracts.deadline import wait_until


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pid_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class LocalProcess:
    """One node's process. `marker` is a string its command line must contain,
    so a recorded pid that the OS has since reused is never signalled."""
    name: str
    argv: list[str]
    log_path: Path
    marker: str
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    pid: int | None = None
    _popen: subprocess.Popen | None = field(default=None, repr=False)

    def is_ours(self) -> bool:
        return pid_alive(self.pid) and self.marker in pid_cmdline(self.pid)

    def running(self) -> bool:
        if self._popen is not None and self._popen.poll() is not None:
            return False
        return self.is_ours()

    def paused(self) -> bool:
        if not self.running():
            return False
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        except OSError:
            return False

    def start(self) -> None:
        if self.running():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"--- chaoslog: starting {self.name} at {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            # A session of its own: a Ctrl-C meant for the harness does not hit the
            # nodes, and the harness decides how each node dies.
            self._popen = subprocess.Popen(
                self.argv, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **self.env})
        self.pid = self._popen.pid

    def signal(self, sig: int) -> None:
        if self.is_ours():
            os.kill(self.pid, sig)

    def freeze(self, frozen: bool, timeout: float = 10.0) -> None:
        """SIGSTOP or SIGCONT, and wait until the kernel shows it: a signal is
        delivered asynchronously, and callers look at the state right after."""
        self.signal(signal.SIGSTOP if frozen else signal.SIGCONT)
        wait_until(lambda: self.paused() == frozen or not self.running(), timeout, 0.01)

    def wait_exit(self, timeout: float) -> bool:
        def exited() -> bool:
            if self._popen is not None:
                return self._popen.poll() is not None
            return not self.is_ours()
        return bool(wait_until(exited, timeout, 0.05))

    def stop(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout`."""
        if not self.running():
            return
        self.signal(signal.SIGCONT)  # a frozen process cannot act on SIGTERM
        self.signal(signal.SIGTERM)
        if not self.wait_exit(timeout):
            self.kill()

    def kill(self) -> None:
        if self.running():
            self.signal(signal.SIGKILL)
            self.wait_exit(10)

    def to_json(self) -> dict:
        return {"name": self.name, "argv": self.argv, "log_path": str(self.log_path),
                "marker": self.marker, "cwd": str(self.cwd) if self.cwd else None,
                "env": self.env, "pid": self.pid}

    @classmethod
    def from_json(cls, d: dict) -> "LocalProcess":
        return cls(d["name"], d["argv"], Path(d["log_path"]), d["marker"],
                   Path(d["cwd"]) if d["cwd"] else None, d["env"], d["pid"])
