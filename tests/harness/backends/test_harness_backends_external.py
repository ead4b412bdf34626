"""The external target: a cluster the harness did not start, reached only
through its bootstrap addresses and acted on through a command file.

The end-to-end test starts a built-in cluster the way a user would start
their own, in another process (`chaoslog cluster up`, local backend), then
runs `chaoslog run --target external` against it with a command file of
`chaoslog cluster kill|start|pause|resume` lines.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.backends.base import ClusterError
from harness.backends.external import (ExternalCluster, ExternalSpec, addresses, load_commands)

CHAOSLOG = str(Path(sys.executable).parent / "chaoslog")
ALL_COMMANDS = {a: f"true {a} {{node}}" for a in ("kill", "stop", "start", "pause", "resume")}


def spec(**kw) -> ExternalSpec:
    """A spec whose brokers are given, so nothing is asked of a network."""
    return ExternalSpec(**{"bootstrap": "127.0.0.1:9092", "broker_ids": [1, 2, 3], **kw})


# -- the command file and the settings (no cluster) --------------------------------------------

@pytest.mark.parametrize("text,message", [
    ('kill = "x"\nreboot = "y"\n', "unknown action 'reboot'"),
    ('kill = "x {nod}"\n', "placeholders are {node}, {id}, {host}, {port}"),
    ('kill = ""\n', "kill must be a non-empty command string"),
    ('kill = 3\n', "kill must be a non-empty command string"),
    ('kill = \n', "not TOML"),
    ('[nodes.b2]\nkill = "x"\n', "[nodes.b2]: nodes are named broker-N"),
    ('nodes = 1\n', "[nodes.broker-N] must be tables of commands"),
    ('[proxy.broker-1]\nlisten = "h:1"\n', "[proxy.broker-1] needs listen"),
    ('[proxy.broker-1]\nlisten = "h:1"\nupstream = "h"\n', "upstream = 'h': expected HOST:PORT"),
    ('[proxy.b1]\nlisten = "h:1"\nupstream = "h:2"\n', "[proxy.b1]: nodes are named broker-N"),
])
def test_a_bad_command_file_names_the_file_and_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "commands.toml"
    path.write_text(text)
    with pytest.raises(ClusterError) as e:
        load_commands(path)
    assert str(path) in str(e.value) and message in str(e.value)


def test_a_command_file_has_defaults_and_per_node_overrides(tmp_path):
    path = tmp_path / "commands.toml"
    path.write_text('kill = "pkill -9 -f id={id}"\n[nodes.broker-2]\nkill = "ssh b2 kill"\n')
    commands, per_node, proxies = load_commands(path)
    assert commands == {"kill": "pkill -9 -f id={id}"}
    assert per_node == {"broker-2": {"kill": "ssh b2 kill"}}
    assert proxies == {}
    with pytest.raises(ClusterError, match="cannot read it"):
        load_commands(tmp_path / "missing.toml")


@pytest.mark.parametrize("bootstrap", ["", "host", "host:port", ":9092", "h:0", "h:70000"])
def test_bad_bootstrap_addresses_are_refused(bootstrap):
    with pytest.raises(ClusterError):
        addresses(bootstrap)


def test_the_external_target_refuses_what_it_cannot_reach():
    from faults.injectors import CATALOGUE
    cluster = ExternalCluster(spec(commands=ALL_COMMANDS))
    supported = {f for f in CATALOGUE if cluster.refuses(f, "broker-1") is None}
    assert supported == {"kill", "stop", "pause", "hard-bounce", "clean-bounce"}
    for f in set(CATALOGUE) - supported:
        assert cluster.refuses(f).startswith(f"the external target cannot run {f}: ")
    assert "ZooKeeper node" in cluster.refuses("kill", "zk-leader")
    assert cluster.refuses("kill", "leader:t/0") is None
    # A process fault needs both of its commands, for every broker.
    partial = ExternalCluster(spec(commands={"kill": "x", "start": "y"},
                                   node_commands={"broker-3": {"pause": "z"}}))
    assert partial.refuses("kill") is None
    assert "no stop command" in partial.refuses("stop")
    assert "no pause or resume command" in partial.refuses("pause")


def test_with_the_proxy_on_the_clients_links_their_faults_can_run():
    proxies = {f"broker-{i}": {"listen": f"127.0.0.1:{19090 + i}", "upstream": f"10.0.0.{i}:9092"}
               for i in (1, 2, 3)}
    cluster = ExternalCluster(spec(proxies=proxies, proxied=True))
    from faults.injectors import CATALOGUE
    supported = {f for f in CATALOGUE if cluster.refuses(f, "broker-1") is None}
    assert supported == {"partition-clients", "latency", "bandwidth", "slicer", "reset-peer",
                         "link-timeout"}
    assert "between nodes it did not start" in cluster.refuses("partition-isolate")
    assert "no [proxy.broker-N] tables" in ExternalCluster(spec()).refuses("partition-clients")
    with pytest.raises(ClusterError, match=r"no \[proxy.broker-3\]: the proxy goes in front of "
                                           "every broker or of none"):
        ExternalCluster(spec(proxies={k: v for k, v in proxies.items() if k != "broker-3"},
                             proxied=True))
    with pytest.raises(ClusterError, match="proxied exactly when"):
        ExternalCluster(spec(proxies=proxies))


def test_the_proxy_listens_beyond_loopback_only_when_the_table_allows_it(tmp_path):
    """Clients run on this machine: a `listen` elsewhere is refused unless
    its table says allow_non_loopback (faults/proxy/README.md, "Control
    surfaces"); then the proxy is started with the flag and the harness warns."""
    from harness.backends.external import exposure_warning, proxy_argv
    path = tmp_path / "commands.toml"
    path.write_text('[proxy.broker-1]\nlisten = "0.0.0.0:19091"\nupstream = "10.0.0.1:9092"\n')
    with pytest.raises(ClusterError, match=r"listen = '0.0.0.0:19091' is not a loopback address.*"
                                           "allow_non_loopback"):
        load_commands(path)
    path.write_text('[proxy.broker-1]\nlisten = "0.0.0.0:19091"\nupstream = "10.0.0.1:9092"\n'
                    'allow_non_loopback = ""\n')
    with pytest.raises(ClusterError, match="a reason"):
        load_commands(path)
    path.write_text('[proxy.broker-1]\nlisten = "0.0.0.0:19091"\nupstream = "10.0.0.1:9092"\n'
                    'allow_non_loopback = "the brokers reach it"\n'
                    '[proxy.broker-2]\nlisten = "localhost:19092"\nupstream = "10.0.0.2:9092"\n')
    _, _, proxies = load_commands(path)
    assert proxies["broker-1"]["allow_non_loopback"] == "the brokers reach it"
    argv = proxy_argv(8474, "label", proxies)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"    # the API: loopback, always
    assert "--allow-non-loopback" in argv
    assert argv[argv.index("--bind-reason") + 1] == "broker-1: the brokers reach it"
    warning = exposure_warning(proxies)
    assert warning.startswith("chaoslog: WARNING: ") and "0.0.0.0:19091" in warning
    assert "broker-2" not in warning and "\n" not in warning
    # Loopback tables: no flag, no warning.
    loopback = {"broker-1": {"listen": "127.0.0.1:19091", "upstream": "10.0.0.1:9092"}}
    assert "--allow-non-loopback" not in proxy_argv(8474, "label", loopback)
    assert exposure_warning(loopback) is None
    ExternalSpec(bootstrap="10.0.0.1:9092", broker_ids=[1, 2], proxies=proxies,
                 proxied=True).validate()


def test_commands_get_the_node_and_a_failing_command_says_what_it_printed(tmp_path):
    log = tmp_path / "did"
    cluster = ExternalCluster(spec(commands={
        "kill": f"echo kill {{node}} {{id}} >> {log}",
        "start": "echo no such unit >&2; exit 5"}))
    cluster.kill_node("broker-2")
    assert log.read_text() == "kill broker-2 2\n"
    assert cluster.node("broker-2").state == "stopped"
    with pytest.raises(ClusterError, match=r"start broker-2: .* exited 5: no such unit"):
        cluster.start_node("broker-2")
    with pytest.raises(ClusterError, match="no pause command for broker-1"):
        cluster.pause_node("broker-1")
    assert "no logs command" in cluster.logs("broker-1")
    with pytest.raises(ClusterError, match="cannot reach an external cluster's files"):
        cluster.log_dir("broker-1")


def test_external_settings_are_refused_in_one_line(capsys):
    from harness.cli import main
    for argv, message in [
        (["--target", "external"], "--target external needs --bootstrap"),
        (["--bootstrap", "127.0.0.1:9092"], "--bootstrap and --commands go with --target external"),
        (["--target", "kafka"], "a system is one of chaoslog, tansu, external"),
        (["--target", "external", "--bootstrap", "127.0.0.1:1"],
         "no bootstrap address answers a Kafka Metadata request"),
        (["--target", "external", "--bootstrap", "127.0.0.1:1", "--backend", "local"],
         "drop --backend"),
    ]:
        assert main(["run", *argv, "--print-schedule"]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (argv, err)


# -- end to end: a cluster started separately, driven by addresses and commands ----------------

@pytest.fixture
def separate_cluster(tmp_path):
    """A built-in cluster on the local backend, started and removed through
    the CLI in other processes, as a user's own cluster would be."""
    name = f"ext{os.getpid()}"
    up = subprocess.run([CHAOSLOG, "cluster", "up", "--backend", "local", "--name", name],
                        capture_output=True, text=True, timeout=180)
    if up.returncode != 0:
        pytest.skip(f"no local backend here: {up.stderr.strip()[-300:]}")
    try:
        commands = tmp_path / "commands.toml"
        commands.write_text("".join(f'{a} = "{CHAOSLOG} cluster {a} {{node}} --name {name}"\n'
                                    for a in ("kill", "stop", "start", "pause", "resume")))
        yield json.loads(up.stdout)["bootstrap_servers"].split(",")[0], commands
    finally:
        subprocess.run([CHAOSLOG, "cluster", "down", "--name", name], capture_output=True,
                       timeout=120)


def test_a_run_against_a_cluster_started_elsewhere(separate_cluster, tmp_path):
    """One bootstrap address and a command file are all the harness gets;
    the leader it kills and the follower it pauses come from Metadata (seed 1
    draws one pause, then one kill)."""
    from harness.cli import build_parser
    from harness.run import execute
    from harness.run_cli import spec_from_args
    bootstrap, commands = separate_cluster
    args = build_parser().parse_args([
        "run", "--target", "external", "pause=follower", "--bootstrap", bootstrap,
        "--commands", str(commands), "--faults", "kill,pause", "--duration", "16",
        "--interval", "2,3", "--fault-duration", "3,4", "--seed", "1", "--quiet", "3",
        "--rate", "40", "--producers", "1", "--out", str(tmp_path / "run")])
    run_spec = replace(spec_from_args(args), checker="reference")
    assert run_spec.backend == "external" and run_spec.cluster.broker_ids == [1, 2, 3]
    result = execute(run_spec, log=lambda m: None)
    assert result.exit_code == 0, result.outcome
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["cluster"]["system"] == "external" and meta["cluster"]["zookeepers"] == 0
    assert meta["result"]["recovery"]["recovered"] is True
    (nemesis,) = meta["result"]["nemesis"]
    assert not nemesis["errors"] and not nemesis["skipped"]
    done = {d["fault"] for d in nemesis["done"]}
    assert done == {"kill", "pause"}, nemesis
    assert all(t.startswith("broker-") for d in nemesis["done"] for t in d["targets"])
    summary = result.verdict.summary
    assert summary["valid"] is True and summary["counts"]["acknowledged"] > 100
    # The history's oracles, and those the Metadata samples feed; not those
    # that need ZooKeeper's epochs or the replicas' files.
    oracles = summary["oracles"]
    assert {oracles[k] for k in ("lost", "isr-invariant", "leaderless", "unrecovered")} == {
        "checked"}
    assert oracles["replica-divergence"].startswith("no input")
    assert oracles["epoch-regression"].startswith("no input")


def test_a_run_against_a_sasl_ssl_cluster_started_elsewhere(tmp_path):
    """A secure cluster (`cluster up --security SASL_SSL`, another process)
    says how to connect; the user writes that into a client config, and the
    external run's every client (and the harness's own requests) connect
    with it: the run is valid, and its records name the password's file,
    never the password."""
    from harness.cli import build_parser
    from harness.run import execute
    from harness.run_cli import spec_from_args
    name = f"extsec{os.getpid()}"
    up = subprocess.run([CHAOSLOG, "cluster", "up", "--backend", "local", "--name", name,
                         "--security", "SASL_SSL"], capture_output=True, text=True, timeout=180)
    if up.returncode != 0:
        pytest.skip(f"no local backend here: {up.stderr.strip()[-300:]}")
    try:
        described = json.loads(up.stdout)
        client = described["client"]
        password = Path(client["sasl.password.file"]).read_text()
        config = tmp_path / "client.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in client.items()))
        commands = tmp_path / "commands.toml"
        commands.write_text(f'kill = "{CHAOSLOG} cluster kill {{node}} --name {name}"\n'
                            f'start = "{CHAOSLOG} cluster start {{node}} --name {name}"\n')
        args = build_parser().parse_args([
            "run", "--target", "external", "--bootstrap",
            described["bootstrap_servers"].split(",")[0], "--commands", str(commands),
            "--client-config", str(config), "--faults", "kill", "--duration", "14",
            "--interval", "2,3", "--fault-duration", "3,4", "--seed", "1", "--quiet", "3",
            "--rate", "40", "--producers", "1", "--out", str(tmp_path / "run")])
        result = execute(replace(spec_from_args(args), checker="reference"), log=lambda m: None)
        assert result.exit_code == 0, result.outcome
        assert result.verdict.summary["counts"]["acknowledged"] > 100
        meta = json.loads((tmp_path / "run" / "run.json").read_text())
        assert meta["client"]["security.protocol"] == "SASL_SSL"
        leaks = [p for p in (tmp_path / "run").rglob("*")
                 if p.is_file() and password.encode() in p.read_bytes()]
        assert leaks == []
    finally:
        subprocess.run([CHAOSLOG, "cluster", "down", "--name", name], capture_output=True,
                       timeout=120)


@pytest.fixture
def advertised_through_a_port(tmp_path):
    """A one-broker built-in cluster started elsewhere whose broker
    advertises a port where nothing listens yet: the harness's proxy will."""
    from harness.host import free_port
    name, port = f"extp{os.getpid()}", free_port()
    up = subprocess.run([CHAOSLOG, "cluster", "up", "--backend", "local", "--brokers", "1",
                         "--name", name, "--broker-config", f"advertised.port={port}"],
                        capture_output=True, text=True, timeout=180)
    if up.returncode != 0:
        pytest.skip(f"no local backend here: {up.stderr.strip()[-300:]}")
    try:
        real = json.loads(up.stdout)["nodes"]["broker-1"]["address"]
        commands = tmp_path / "commands.toml"
        commands.write_text(f'[proxy.broker-1]\nlisten = "127.0.0.1:{port}"\n'
                            f'upstream = "{real}"\n')
        yield real, commands
    finally:
        subprocess.run([CHAOSLOG, "cluster", "down", "--name", name], capture_output=True,
                       timeout=120)


def test_faults_on_the_clients_links_of_a_cluster_started_elsewhere(advertised_through_a_port,
                                                                     tmp_path):
    """The proxy goes between the clients and the broker (which advertises
    the proxy's address): the clients are cut off from it, then their link
    is slowed; the run recovers and loses nothing; the proxy is gone after."""
    from harness.cli import build_parser
    from harness.run import execute
    from harness.run_cli import spec_from_args
    real, commands = advertised_through_a_port
    args = build_parser().parse_args([
        "run", "--target", "external", "--bootstrap", real, "--commands", str(commands),
        "--faults", "partition-clients,latency", "--replication-factor", "1",
        "--duration", "16", "--interval", "2,3", "--fault-duration", "3,4", "--seed", "2",
        "--quiet", "3", "--rate", "40", "--producers", "1", "--out", str(tmp_path / "run")])
    run_spec = replace(spec_from_args(args), checker="reference")
    assert run_spec.cluster.proxied and set(run_spec.cluster.proxies) == {"broker-1"}
    result = execute(run_spec, log=lambda m: None)
    assert result.exit_code == 0, result.outcome
    (nemesis,) = result.outcome["nemesis"]
    assert not nemesis["errors"] and not nemesis["skipped"]
    assert {d["fault"] for d in nemesis["done"]} == {"partition-clients", "latency"}, nemesis
    history = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").open()]
    cut = [e for e in history if e["f"] == "nemesis" and e["fault"] == "partition-clients"]
    (start, stop) = [e["time"] for e in cut]
    assert "via proxy" in cut[1]["detail"], cut
    # Cut off from the only broker, the clients get no acknowledgement until the heal.
    acked = [e["time"] for e in history if e["f"] == "send" and e["type"] == "ok"]
    assert [t for t in acked if t < start] and [t for t in acked if t > stop]
    assert not [t for t in acked if start + 500_000_000 < t < stop], "acks through the cut"
    assert result.verdict.summary["valid"] is True
    from harness.host import state_dir
    assert not [p for p in state_dir().glob("run-*.json")
                if json.loads(p.read_text()).get("backend") == "external"]


def test_the_proxy_of_a_killed_run_is_reaped(tmp_path):
    """An external run's proxy outlives a SIGKILLed harness only until the
    next chaoslog command: its state file names a dead owner."""
    from harness.backends.process import LocalProcess
    from harness.host import free_port, state_dir
    from harness.reaper import reap_local
    base = Path(tempfile.mkdtemp(prefix="chaoslog-extreap-"))
    proxy = LocalProcess("proxy", [sys.executable, "-m", "faults.proxy", "--host", "127.0.0.1",
                                   "--port", str(free_port()), "--label", str(base)],
                         base / "proxy.log", str(base), cwd=base)
    proxy.start()
    state = state_dir() / f"extreap{os.getpid()}.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"backend": "external", "owner": "1:never",
                                 "base_dir": str(base), "proxy": proxy.to_json()}))
    try:
        assert proxy.running()
        removed = reap_local()
        assert f"process proxy ({proxy.pid})" in removed
        assert not proxy.running() and not state.exists() and not base.exists()
    finally:
        proxy.kill()
        state.unlink(missing_ok=True)
