"""The broker's ZooKeeper access, through kazoo.

Blocking kazoo calls run on a single dedicated thread (`call`), so the event
loop never waits on ZooKeeper and the broker's own writes reach ZooKeeper in
the order it issued them. Kazoo's connection listener runs on kazoo's thread;
it only writes the session file and hands "new session" to the event loop
with call_soon_threadsafe.

What the broker writes (zkpaths.py): /brokers/start_epochs/<id> (bumped at
every registration), its ephemeral /brokers/ids/<id> registration, conditional ISR
updates of /brokers/topics/T/P/leaderAndISR (leader only, keeping leader,
leader_epoch and controller_epoch), /isr_change_notification/isr_change_N
sequential znodes, and producer id blocks in /latest_producer_id_block.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from cluster import zkpaths
from cluster.zkpaths import BrokerRegistration, LeaderAndIsr, TopicAssignment

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000

__all__ = ["ZkClient", "BadVersionError", "NoNodeError"]


class ZkClient:
    def __init__(self, hosts: str, session_timeout_ms: int, connection_timeout_ms: int,
                 session_file: Path | None = None):
        self.hosts = hosts
        self.connection_timeout_s = connection_timeout_ms / 1000
        self.kazoo = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000,
                                 connection_retry={"max_tries": -1, "delay": 0.2,
                                                   "max_delay": 2})
        self.session_file = session_file
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="zk")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_new_session: Callable[[], Any] | None = None
        self._session_lost = False
        self._pid_block: tuple[int, int] | None = None  # [next, end)

    # -- lifecycle -----------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop | None = None,
              on_new_session: Callable[[], Any] | None = None) -> None:
        """Connect (blocking). `on_new_session` is called on `loop` after a
        session expired and a new one was established."""
        self._loop = loop
        self._on_new_session = on_new_session
        self.kazoo.add_listener(self._listener)
        self.kazoo.start(timeout=self.connection_timeout_s)
        self._write_session_file()

    def stop(self) -> None:
        try:
            self.kazoo.stop()
            self.kazoo.close()
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def session_id(self) -> int:
        cid = self.kazoo.client_id
        return cid[0] if cid else 0

    def _listener(self, state: str) -> None:
        # Runs on kazoo's thread: no blocking calls here.
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("ZooKeeper session lost")
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended")
        elif state == KazooState.CONNECTED:
            threading.Thread(target=self._write_session_file, daemon=True).start()
            if self._session_lost:
                self._session_lost = False
                log.warning("ZooKeeper: new session established")
                if self._loop is not None and self._on_new_session is not None:
                    self._loop.call_soon_threadsafe(self._on_new_session)

    def _write_session_file(self) -> None:
        """<log.dirs>/zk-session.json, for the harness to expire our session."""
        if self.session_file is None:
            return
        # client_id is set a moment after the CONNECTED event on a new session.
        for _ in range(50):
            cid = self.kazoo.client_id
            if cid and cid[0]:
                break
            time.sleep(0.02)
        else:
            return
        body = json.dumps({"session_id": cid[0], "password": cid[1].hex()})
        tmp = self.session_file.with_suffix(f".tmp{threading.get_ident()}")
        try:
            self.session_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(body)
            os.replace(tmp, self.session_file)
        except OSError as e:
            log.error("cannot write %s: %s", self.session_file, e)

    async def call(self, fn: Callable, *args: Any) -> Any:
        """Run a blocking ZooKeeper function on the ZooKeeper thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- blocking operations (run them through `call`, or at startup) ----------------

    def ensure_persistent_paths(self) -> None:
        for path in zkpaths.PERSISTENT_PATHS:
            self.kazoo.retry(self.kazoo.ensure_path, path)

    def bump_start_epoch(self, broker_id: int) -> int:
        path = zkpaths.broker_start_epoch_path(broker_id)
        while True:
            try:
                data, stat = self.kazoo.retry(self.kazoo.get, path)
                n = int(zkpaths.loads(data) or 0) + 1
                self.kazoo.set(path, zkpaths.dumps(n), version=stat.version)
                return n
            except NoNodeError:
                try:
                    self.kazoo.create(path, zkpaths.dumps(1), makepath=True)
                    return 1
                except NodeExistsError:
                    continue
            except BadVersionError:
                continue

    def register_broker(self, reg: BrokerRegistration, give_up_s: float = 60.0) -> None:
        """Create the ephemeral /brokers/ids/<id>. A registration left by our
        previous incarnation's session lingers until that session expires:
        wait for it (Kafka does the same)."""
        path = zkpaths.broker_path(reg.broker_id)
        deadline = time.monotonic() + give_up_s
        while True:
            try:
                self.kazoo.retry(self.kazoo.create, path, reg.encode(), ephemeral=True,
                                 makepath=True)
                log.info("registered %s as %s:%d (start epoch %d)", path, reg.host, reg.port,
                         reg.start_epoch)
                return
            except NodeExistsError:
                try:
                    _, stat = self.kazoo.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.session_id:
                    return
                if time.monotonic() > deadline:
                    raise
                log.warning("%s exists (session %#x); waiting for it to expire", path,
                            stat.ephemeralOwner)
                time.sleep(0.5)

    def topic_assignments(self) -> dict[str, TopicAssignment]:
        out = {}
        for topic in self.kazoo.retry(self.kazoo.get_children, zkpaths.TOPICS):
            try:
                data, _ = self.kazoo.retry(self.kazoo.get, zkpaths.topic_path(topic))
            except NoNodeError:
                continue
            out[topic] = TopicAssignment.decode(data)
        return out

    def pending_reassignment(self) -> dict[tuple[str, int], tuple[int, ...]]:
        """The reassignment in progress: partition -> its new replicas (RAR)."""
        try:
            data, _ = self.kazoo.retry(self.kazoo.get, zkpaths.REASSIGN_PARTITIONS)
        except NoNodeError:
            return {}
        try:
            return zkpaths.decode_reassignment(data)
        except (ValueError, KeyError, TypeError):   # damaged: the controller says so
            return {}

    def leader_and_isr(self, topic: str, partition: int) -> LeaderAndIsr | None:
        try:
            data, stat = self.kazoo.retry(self.kazoo.get,
                                          zkpaths.leader_and_isr_path(topic, partition))
        except NoNodeError:
            return None
        return LeaderAndIsr.decode(data, stat.version)

    def update_isr(self, topic: str, partition: int, new: LeaderAndIsr) -> int:
        """Conditionally write leader/ISR at version new.zk_version; returns the
        new version. Raises BadVersionError when the znode changed under us. A
        write retried after a connection loss may find its own first attempt:
        same content means it succeeded (Kafka's checkLeaderAndIsrZkData)."""
        path = zkpaths.leader_and_isr_path(topic, partition)
        try:
            stat = self.kazoo.set(path, new.encode(), version=new.zk_version)
            return stat.version
        except BadVersionError:
            data, stat = self.kazoo.retry(self.kazoo.get, path)
            current = LeaderAndIsr.decode(data, stat.version)
            if (current.leader, current.leader_epoch, tuple(sorted(current.isr)),
                    current.controller_epoch) == (new.leader, new.leader_epoch,
                                                  tuple(sorted(new.isr)), new.controller_epoch) \
                    and stat.version == new.zk_version + 1:
                return stat.version
            raise

    def notify_isr_change(self, partitions: list[tuple[str, int]]) -> None:
        self.kazoo.retry(self.kazoo.create, zkpaths.ISR_CHANGE_PREFIX,
                         zkpaths.encode_partition_list(partitions), sequence=True,
                         makepath=True)

    def controller_id(self) -> int:
        try:
            data, _ = self.kazoo.retry(self.kazoo.get, zkpaths.CONTROLLER)
        except NoNodeError:
            return -1
        d = zkpaths.loads(data)
        if isinstance(d, dict):
            return int(d.get("brokerid", -1))
        return int(d) if d is not None else -1

    def broker_registration(self, broker_id: int) -> BrokerRegistration | None:
        try:
            data, _ = self.kazoo.retry(self.kazoo.get, zkpaths.broker_path(broker_id))
        except NoNodeError:
            return None
        return BrokerRegistration.decode(broker_id, data)

    def next_producer_id(self, broker_id: int) -> int:
        """A cluster-unique producer id: blocks of ids are claimed with a
        conditional write of /latest_producer_id_block, as Kafka does."""
        if self._pid_block is None or self._pid_block[0] >= self._pid_block[1]:
            self._pid_block = self._claim_pid_block(broker_id)
        nxt, end = self._pid_block
        self._pid_block = (nxt + 1, end)
        return nxt

    def _claim_pid_block(self, broker_id: int) -> tuple[int, int]:
        while True:
            try:
                data, stat = self.kazoo.retry(self.kazoo.get, zkpaths.PRODUCER_ID_BLOCK)
            except NoNodeError:
                data, stat = None, None
            prev = zkpaths.loads(data) if data else None
            start = int(prev["block_end"]) + 1 if prev else 0
            end = start + PRODUCER_ID_BLOCK_SIZE - 1
            body = zkpaths.dumps({"version": 1, "broker": broker_id, "block_start": start,
                                  "block_end": end})
            try:
                if stat is None:
                    self.kazoo.create(zkpaths.PRODUCER_ID_BLOCK, body, makepath=True)
                else:
                    self.kazoo.set(zkpaths.PRODUCER_ID_BLOCK, body, version=stat.version)
                return start, end + 1
            except (NodeExistsError, BadVersionError):
                continue
