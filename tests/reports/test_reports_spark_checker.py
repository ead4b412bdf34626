"""reports/spark_checker.py's session settings: where the driver listens
(faults/proxy/README.md, "Control surfaces"). No JVM is started: get_spark's
builder is replaced by one that records its settings."""
from __future__ import annotations

import pytest

from reports import spark_checker
from reports.spark_checker import DEFAULT_CONF, driver_exposure, loopback_master

LOOPBACK = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


@pytest.mark.parametrize("master,loopback", [
    ("spark://127.0.0.1:7077", True), ("spark://localhost:7077", True),
    ("spark://127.0.0.1:7077,[::1]:7078", True), ("spark://10.0.0.3:7077", False),
    ("spark://127.0.0.1:7077,10.0.0.3:7077", False), ("local[*]", False), ("yarn", False),
])
def test_a_master_on_loopback(master, loopback):
    assert loopback_master(master) is loopback


def test_the_ui_is_off_and_a_local_driver_says_nothing():
    assert DEFAULT_CONF["spark.ui.enabled"] == "false"
    assert driver_exposure(None, {**DEFAULT_CONF, **LOOPBACK}, {"SPARK_LOCAL_IP": "127.0.0.1"}) \
        is None
    # A UI asked for binds SPARK_LOCAL_IP: loopback too.
    assert driver_exposure("local[2]", {**DEFAULT_CONF, **LOOPBACK, "spark.ui.enabled": "true"},
                           {"SPARK_LOCAL_IP": "127.0.0.1"}) is None


def test_a_driver_beyond_loopback_warns_in_one_line():
    remote = driver_exposure("spark://10.0.0.3:7077", dict(DEFAULT_CONF), {})
    assert remote.startswith("chaoslog: WARNING: the Spark driver listens on ")
    assert "--master spark://10.0.0.3:7077" in remote and "read the histories" in remote
    assert "\n" not in remote
    by_env = driver_exposure(None, dict(DEFAULT_CONF), {"SPARK_LOCAL_IP": "192.0.2.7"})
    assert "listens on 192.0.2.7" in by_env and "SPARK_LOCAL_IP" in by_env
    ui = driver_exposure(None, {**DEFAULT_CONF, **LOOPBACK, "spark.ui.enabled": "true"}, {})
    assert "web UI listens on 0.0.0.0 (every interface)" in ui


class _Builder:
    """SparkSession.builder's chain, recording what get_spark sets."""

    def __init__(self):
        self.conf: dict[str, str] = {}
        self.master_url = None

    def appName(self, name):
        return self

    def master(self, url):
        self.master_url = url
        return self

    def config(self, key, value):
        self.conf[key] = value
        return self


@pytest.fixture
def recorded(monkeypatch):
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    builder = _Builder()
    monkeypatch.setattr(SparkSession, "builder", builder)
    monkeypatch.setattr(SparkContext, "_gateway", None)
    monkeypatch.setattr(spark_checker, "_start_quietly", lambda b: b)
    monkeypatch.setenv("SPARK_LOCAL_IP", "unset")   # so that teardown restores the original
    monkeypatch.delenv("SPARK_LOCAL_IP")
    return builder


@pytest.mark.parametrize("master", [None, "local[2]", "spark://127.0.0.1:7077"])
def test_a_driver_on_this_machine_binds_loopback(recorded, capsys, master):
    import os
    spark_checker.get_spark(master)
    assert recorded.conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert recorded.conf["spark.driver.host"] == "127.0.0.1"
    assert recorded.conf["spark.ui.enabled"] == "false"
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert capsys.readouterr().err == ""


def test_a_remote_master_warns(recorded, capsys):
    spark_checker.get_spark("spark://10.0.0.3:7077")
    assert "spark.driver.bindAddress" not in recorded.conf    # the executors must reach it
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "WARNING" in err and "10.0.0.3" in err
