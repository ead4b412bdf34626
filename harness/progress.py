"""The live progress line of a run: one updating line on a terminal, a line
every 5 s otherwise (a CI log), until the run is done. It only reads the Run:
its phase, the history's running counts and the faults active now."""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO


class Progress:
    def __init__(self, run: Any, stream: TextIO = sys.stderr):
        self.run = run
        self.stream = stream
        self.tty = stream.isatty()
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="progress")

    def start(self) -> "Progress":
        self._thread.start()
        return self

    def line(self, rate: float) -> str:
        st = self.run.stats
        faults = ",".join(f"{a['fault']}({','.join(a['targets'])})"
                          for a in self.run.active_faults()) or "-"
        sends = st.counts.get(("send", "ok"), 0)
        return (f"[{time.monotonic() - self._t0:6.1f}s] {self.run.phase:<11} {rate:7.1f} ops/s  "
                f"acked {sends}  errors {st.failed()}  faults {faults}")

    def _loop(self) -> None:
        period = 1.0 if self.tty else 5.0
        last_n, last_t = 0, time.monotonic()
        while not self._stop.wait(period) and self.run.phase != "done":
            n, t = self.run.stats.completed(), time.monotonic()
            rate = (n - last_n) / max(1e-6, t - last_t)
            last_n, last_t = n, t
            if self.tty:
                self.stream.write("\r" + self.line(rate)[:200].ljust(120))
            else:
                self.stream.write(self.line(rate) + "\n")
            self.stream.flush()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
