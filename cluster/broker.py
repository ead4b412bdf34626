"""The broker process: `python -m cluster.broker CONFIG`.

Startup (docs/design.md#broker-startup, as Kafka 0.8 did it):
  1. load the config (a bad one: one-line error on stderr, exit 2);
  2. connect to ZooKeeper (zookeeper.session.timeout.ms), create the persistent
     paths, bump /brokers/start_epochs/<id>, write <log.dirs>/zk-session.json;
  3. read the topic assignments, open the local logs and delete those no
     longer assigned to this broker or of another topic id (topics deleted
     while it was down, maybe created again), HW =
     min(checkpointed HW, LEO); replicas then wait for the controller's
     LeaderAndIsr to become leader or follower;
  4. start the socket server, start the controller component, THEN register
     the ephemeral /brokers/ids/<id> (so the controller only sees brokers
     that can serve). Until the controller's first UpdateMetadata the broker
     does not know the cluster and closes connections asking for Metadata.
After a ZooKeeper session expiry the broker re-registers with the new session.

SIGTERM: controlled shutdown (ask the controller to move leadership away,
controlled.shutdown.max.retries attempts), then stop fetchers, checkpoint HWs,
flush and close the logs, close the ZooKeeper session, exit 0.

Concurrency: one asyncio event loop (see cluster/server/replica_manager.py).
"""
from __future__ import annotations

import asyncio
import importlib
import logging
import signal
import sys
from pathlib import Path

from cluster.config import BrokerConfig, ConfigError
from cluster.log import LogConfig, LogManager
from cluster.protocol import control
from cluster.protocol import errors as E
from cluster.server.fetcher import BrokerConnection
from cluster.server.kafka_apis import KafkaApis
from cluster.server.metadata_cache import MetadataCache
from cluster.server.replica_manager import ReplicaManager
from cluster.server.socket_server import SocketServer
from cluster.server.state_window import StateWindow
from cluster.server.zk_client import ZkClient
from cluster.zkpaths import BrokerRegistration

log = logging.getLogger("cluster.broker")


class Broker:
    def __init__(self, cfg: BrokerConfig):
        self.cfg = cfg
        self.broker_id = cfg.broker_id
        self.log_dir = Path(cfg["log.dirs"].split(",")[0])
        self.zk: ZkClient | None = None
        self.controller = None
        self.v2 = None          # the V2 component (coordination=v2), instead of the controller
        self.start_epoch = 0
        self._stop = asyncio.Event()
        self._registered = False

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        cfg = self.cfg
        self.zk = zk = ZkClient(cfg["zookeeper.connect"], cfg["zookeeper.session.timeout.ms"],
                                cfg["zookeeper.connection.timeout.ms"],
                                self.log_dir / "zk-session.json")
        await loop.run_in_executor(None, zk.start, loop, self._on_new_session)
        await zk.call(zk.ensure_persistent_paths)
        self.start_epoch = await zk.call(zk.bump_start_epoch, self.broker_id)
        log.info("connected to ZooKeeper %s (session %#x), start epoch %d",
                 cfg["zookeeper.connect"], zk.session_id, self.start_epoch)

        # V2 deletes replicas only on a close-replica of its queue
        # (docs/design.md#v2-broker); the controller mode by the assignment.
        v2 = cfg["coordination"] == "v2"
        assigned = None if v2 else await self._assigned_here()
        self.log_manager = LogManager(self.log_dir, LogConfig.from_broker_config(cfg))
        self.metadata = MetadataCache(self.broker_id, cfg.advertised)
        self.rm = ReplicaManager(cfg, self.log_manager, zk, self.metadata, self.start_epoch)
        self.rm.load(assigned)
        self.rm.start()

        window = None
        if cfg["chaoslog.state.window.enable"]:
            window = StateWindow(self.broker_id, lambda: self.start_epoch,
                                 lambda: self.rm.partitions, self._controller_view,
                                 cfg["chaoslog.state.window.max.partitions"])
        self.apis = KafkaApis(cfg, self.rm, self.metadata, zk,
                              controller=lambda: getattr(self, "controller", None), window=window)
        self.server = SocketServer(self.apis, cfg["host.name"], cfg["port"],
                                   cfg["socket.request.max.bytes"])
        await self.server.start()
        if cfg["coordination"] == "v2":
            await self._start_v2()
        else:
            self._start_controller()
        await self._register()
        log.info("broker %d started", self.broker_id)

        await self._stop.wait()
        log.info("broker %d shutting down", self.broker_id)
        if cfg["controlled.shutdown.enable"] and self.v2 is None:
            await self._controlled_shutdown()
        await self._shutdown()
        return 0

    # -- ZooKeeper registration -------------------------------------------------------------

    async def _assigned_here(self) -> dict[tuple[str, int], str]:
        """Each partition ZooKeeper assigns to this broker, with its topic id.
        A replica a pending reassignment is moving here is in the new
        replicas (RAR) only, not yet in the assignment: it counts too
        (docs/design.md#broker-startup). Read first, so that a reassignment
        completing meanwhile shows in the assignment read next."""
        reassigning = await self.zk.call(self.zk.pending_reassignment)
        assignments = await self.zk.call(self.zk.topic_assignments)
        assigned = {(t, p): a.topic_id for t, a in assignments.items()
                    for p, replicas in a.partitions.items() if self.broker_id in replicas}
        for tp, rar in reassigning.items():
            if self.broker_id in rar:
                assigned[tp] = assignments[tp[0]].topic_id if tp[0] in assignments else ""
        return assigned

    async def _register(self) -> None:
        host, port = self.cfg.advertised
        reg = BrokerRegistration(self.broker_id, host, port, self.start_epoch)
        await self.zk.call(self.zk.register_broker, reg)
        self._registered = True

    def _on_new_session(self) -> None:
        """The session expired and kazoo made a new one: our ephemeral znode is
        gone, so register again (Kafka's handleNewSession)."""
        if self._registered and not self._stop.is_set():
            log.warning("re-registering broker %d after ZooKeeper session expiry",
                        self.broker_id)
            asyncio.get_running_loop().create_task(self._reregister())

    async def _reregister(self) -> None:
        """A new registration gets a new start epoch first: requests the
        controller addressed to the previous one (queued or in flight while
        this broker was cut off) are then refused, not applied over newer
        ones (docs/design.md#controller-epoch)."""
        try:
            self.start_epoch = await self.zk.call(self.zk.bump_start_epoch, self.broker_id)
            self.rm.start_epoch = self.start_epoch
            # Counted dead meanwhile, this broker was told of no deletion; no
            # controller request reaches it between the new epoch and the
            # registration, so what it reads now is what it keeps.
            if self.v2 is not None:
                self.v2.on_new_session()
            else:
                self.rm.delete_unassigned(await self._assigned_here())
            await self._register()
        except Exception:
            log.exception("re-registration failed")

    # -- controller component, or the V2 component ----------------------------------------------

    async def _start_v2(self) -> None:
        """coordination=v2 (docs/design.md#v2): no controller; the V2 component
        drains this broker's state-change queue and starts its replicas
        before the broker registers."""
        from cluster.v2.coordinator import Coordinator
        self.v2 = Coordinator(self.cfg, self.zk, self.rm, self.metadata)
        await self.v2.start()

    def _controller_view(self) -> dict | None:
        """The active controller's view for the state window, or None. It is
        taken between two controller events; on the broker's event loop, so
        it waits at most 50 ms for a running event and says `busy` instead."""
        controller = self.controller
        if controller is None or not controller.is_active:
            return None
        try:
            return controller.snapshot(timeout=0.05)
        except TimeoutError:
            return {"active": True, "busy": True}

    def _start_controller(self) -> None:
        if not self.cfg["chaoslog.controller.enable"]:
            log.info("controller component disabled (chaoslog.controller.enable=false)")
            return
        cls = None
        for modname in ("cluster.controller", "cluster.controller.controller"):
            try:
                cls = getattr(importlib.import_module(modname), "Controller", None)
            except ImportError:
                cls = None
            if cls is not None:
                break
        if cls is None:
            log.warning("cluster.controller.Controller is not available: running without a "
                        "controller component")
            return
        try:
            self.controller = cls(self.cfg, self.zk.kazoo, self.broker_id)
            self.controller.startup()
        except Exception:
            log.exception("controller component failed to start; running without it")
            self.controller = None

    # -- shutdown -------------------------------------------------------------------------------

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move leadership off this broker before it stops."""
        retries = self.cfg["controlled.shutdown.max.retries"]
        backoff = self.cfg["controlled.shutdown.retry.backoff.ms"] / 1000
        timeout = self.cfg["controller.socket.timeout.ms"] / 1000
        for attempt in range(1, retries + 1):
            try:
                cid = await self.zk.call(self.zk.controller_id)
                addr = self.cfg.peer_addresses().get(cid)
                if addr is None and cid >= 0:
                    reg = await self.zk.call(self.zk.broker_registration, cid)
                    addr = (reg.host, reg.port) if reg else None
                if addr is None:
                    raise ConnectionError("no controller")
                conn = BrokerConnection(addr[0], addr[1], f"broker-{self.broker_id}", timeout)
                await conn.connect()
                try:
                    frame = control.encode_request(
                        control.ControlledShutdownRequest(self.broker_id, self.start_epoch),
                        attempt, f"broker-{self.broker_id}")
                    raw = await conn.request_frame(frame)
                finally:
                    conn.close()
                resp = control.decode_response(control.CONTROLLED_SHUTDOWN, raw)
                if resp.error == E.NONE and not resp.partitions_remaining:
                    log.info("controlled shutdown succeeded (attempt %d)", attempt)
                    return
                log.warning("controlled shutdown attempt %d: %s, %d partitions remaining",
                            attempt, E.name(resp.error), len(resp.partitions_remaining))
            except Exception as e:
                log.warning("controlled shutdown attempt %d failed: %r", attempt, e)
            if attempt < retries:
                await asyncio.sleep(backoff)
        log.warning("controlled shutdown failed after %d attempts; shutting down anyway",
                    retries)

    async def _shutdown(self) -> None:
        loop = asyncio.get_running_loop()
        if self.v2 is not None:
            await self.v2.shutdown()
        if self.controller is not None:
            try:
                await loop.run_in_executor(None, self.controller.shutdown)
            except Exception:
                log.exception("controller shutdown failed")
        await self.server.stop()
        await self.rm.shutdown()  # stops fetchers, checkpoints HWs
        await loop.run_in_executor(None, self.log_manager.close)
        await loop.run_in_executor(None, self.zk.stop)
        log.info("broker %d stopped", self.broker_id)


def setup_logging(broker_id: int) -> None:
    fmt = f"%(asctime)s broker={broker_id} %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=logging.INFO, format=fmt, stream=sys.stderr)
    logging.getLogger("kazoo").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m cluster.broker CONFIG", file=sys.stderr)
        return 2
    try:
        cfg = BrokerConfig.load(argv[0])
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    setup_logging(cfg.broker_id)
    try:
        return asyncio.run(Broker(cfg).run())
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
