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
  4. start the socket server (on a TLS or SASL listener with its security,
     the users read from ZooKeeper first: docs/design.md#security), start the
     coordination mode's component (the controller component; in V2 its
     coordinator, docs/design.md#v2-broker, which keeps every replica in
     step 3 and starts them itself), THEN register
     the ephemeral /brokers/ids/<id> (so the controller only sees brokers
     that can serve). Until the controller's first UpdateMetadata the broker
     does not know the cluster and closes connections asking for Metadata.
After a ZooKeeper session expiry the broker re-registers with the new session.

SIGTERM: controlled shutdown (ask the controller to move leadership away,
controlled.shutdown.max.retries attempts; not in V2), then stop fetchers, checkpoint HWs,
flush and close the logs, close the ZooKeeper session, exit 0.

Concurrency: one asyncio event loop (see cluster/server/replica_manager.py).
"""
from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from cluster import modes
from cluster.config import BrokerConfig, ConfigError
from cluster.coordination import Component
from cluster.log import LogConfig, LogManager
from cluster.server.authenticator import SaslAuthenticator
from cluster.server.credentials import CredentialCache
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
        self.server_ssl = cfg.security.server_ssl   # cfg.security: ConfigError when unusable
        self.broker_id = cfg.broker_id
        self.log_dir = Path(cfg["log.dirs"].split(",")[0])
        self.coordination = modes.of(cfg["coordination"])   # the mode, chosen here once
        self.zk: ZkClient | None = None
        self.component: Component | None = None   # the controller component, or V2's
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

        self.log_manager = LogManager(self.log_dir, LogConfig.from_broker_config(cfg))
        self.metadata = MetadataCache(self.broker_id, cfg.advertised)
        self.rm = ReplicaManager(cfg, self.log_manager, zk, self.metadata, self.start_epoch,
                                 announce_isr_changes=self.coordination.has_controller)
        self.component = component = self.coordination.component(
            cfg, zk, self.rm, self.metadata, lambda: self.start_epoch)
        self.rm.load(await component.assigned_replicas())
        self.rm.start()

        window = None
        if cfg["chaoslog.state.window.enable"]:
            window = StateWindow(self.broker_id, lambda: self.start_epoch,
                                 lambda: self.rm.partitions, component.view,
                                 cfg["chaoslog.state.window.max.partitions"])
        self.apis = KafkaApis(cfg, self.rm, self.metadata, zk, self.coordination, component,
                              window=window)
        self.server = SocketServer(self.apis, cfg["host.name"], cfg["port"],
                                   cfg["socket.request.max.bytes"], self.server_ssl,
                                   await self._authenticators())
        await self.server.start()
        await component.start()
        await self._register()
        log.info("broker %d started", self.broker_id)

        await self._stop.wait()
        log.info("broker %d shutting down", self.broker_id)
        await self._shutdown()
        return 0

    async def _authenticators(self):
        """On a SASL listener: a new connection's authenticator, which looks
        users up in the credential cache (docs/design.md#security)."""
        security = self.cfg.security
        if not security.sasl:
            return None
        credentials = CredentialCache(self.zk.kazoo)
        await self.zk.call(credentials.start)
        return lambda peer: SaslAuthenticator(security.mechanisms, credentials.lookup, peer)

    # -- ZooKeeper registration -------------------------------------------------------------

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
            await self.component.on_new_session()
            await self._register()
        except Exception:
            log.exception("re-registration failed")

    # -- shutdown -------------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """The component first (a controlled shutdown where the mode has
        one: the controller moves leadership away while this broker still
        serves), then the server, the replicas and the logs."""
        loop = asyncio.get_running_loop()
        await self.component.stop(clean=True)
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
        broker = Broker(cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    setup_logging(cfg.broker_id)
    try:
        return asyncio.run(broker.run())
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
