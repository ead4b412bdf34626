"""harness/zookeeper.py's zoo.cfg: a ZooKeeper on this machine listens on
loopback only (faults/proxy/README.md, "Control surfaces")."""
from __future__ import annotations

from pathlib import Path

from harness.zookeeper import zoo_cfg


def _settings(text: str) -> dict[str, str]:
    pairs = [line.split("=", 1) for line in text.splitlines() if line]
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), keys   # no setting twice
    return dict(pairs)


def test_zookeeper_listens_on_loopback_only():
    cfg = _settings(zoo_cfg(Path("/d"), 2181, servers={1: ("127.0.0.1", 2888, 3888)},
                            extra={"minSessionTimeout": 1000}))
    assert cfg["clientPortAddress"] == "127.0.0.1"     # ZooKeeper's default: every interface
    assert cfg["admin.enableServer"] == "false"        # Jetty on 0.0.0.0:8080 otherwise
    assert cfg["server.1"] == "127.0.0.1:2888:3888"    # the ensemble ports: that address
    assert "quorumListenOnAllIPs" not in cfg
