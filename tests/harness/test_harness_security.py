"""The clients' security settings (harness/security.py): loading them,
every refusal, the three clients' mappings, and the promise that the
password reaches no spec, run.json or worker command line (pure: no
cluster, no network)."""
import argparse
import json

import pytest

import harness.run_cli as run_cli
from harness.campaign import Campaign, CampaignError
from harness.run import Refused, RunSpec
from harness.security import PLAINTEXT, ClientSecurity
from harness.workload import Workload, WorkloadSpec
from harness.workload.worker import build_parser
from reports.exit_codes import EXIT_REFUSED

SECRET = "s3cret-Pa55"
# A self-signed CA (EC P-256, valid until 2126), only ever loaded.
CA_PEM = """-----BEGIN CERTIFICATE-----
MIIBjDCCATOgAwIBAgIUU0h7vtOVykkMSN5GPNuQmtIYPdQwCgYIKoZIzj0EAwIw
GzEZMBcGA1UEAwwQY2hhb3Nsb2ctdGVzdC1jYTAgFw0yNjExMjkxNjM4NTdaGA8y
MTI2MTEwNTE2Mzg1N1owGzEZMBcGA1UEAwwQY2hhb3Nsb2ctdGVzdC1jYTBZMBMG
ByqGSM49AgEGCCqGSM49AwEHA0IABG3TPUIEFB3xAW2rAY157/d/QqK69b3wYgq6
cHzAps9RSuXTT0d/yMjmz4EHhEVEqULb3JfsLKouV8sl5JRiN0WjUzBRMB0GA1Ud
DgQWBBQIe0Pd283G9PXrsjk5OdMjQrLyDjAfBgNVHSMEGDAWgBQIe0Pd283G9PXr
sjk5OdMjQrLyDjAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0cAMEQCIGmc
Vob6OlX07im5a8HEk/pejXzVTv99ZxvhK31aAGJDAiAkTAdY4kVJPrp58R5xbcUJ
R5CJSgW3qgt0/ZBg39hFNA==
-----END CERTIFICATE-----
"""


@pytest.fixture
def ca(tmp_path):
    path = tmp_path / "ca.pem"
    path.write_text(CA_PEM)
    return str(path)


@pytest.fixture
def password(monkeypatch):
    monkeypatch.setenv("CHAOSLOG_SASL_PASSWORD", SECRET)
    return SECRET


def sasl_ssl(ca, **fields):
    return ClientSecurity(**{"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                             "ssl_ca_location": ca, "username": "chaos",
                             "password_env": "CHAOSLOG_SASL_PASSWORD", **fields})


def args(*argv):
    p = argparse.ArgumentParser()
    run_cli.add_parser(p.add_subparsers())
    return p.parse_args(list(argv))


def cli(*argv):
    a = args(*argv)
    return a.func(a)


def external(client):
    """A run against an external cluster whose brokers are given (no network)."""
    from harness.backends.external import ExternalSpec
    return RunSpec(ExternalSpec(bootstrap="127.0.0.1:9092", broker_ids=[1, 2, 3]), client=client)


# -- loading --------------------------------------------------------------------------------

def test_a_properties_file_and_a_toml_file_load_the_same_settings(tmp_path, ca):
    props = tmp_path / "client.properties"
    props.write_text(f"""# Kafka client properties
security.protocol=SASL_SSL
sasl.mechanism = SCRAM-SHA-512
! a comment of the other kind
sasl.username=chaos
sasl.password.env=CHAOSLOG_SASL_PASSWORD
ssl.ca.location={ca}
""")
    toml = tmp_path / "client.toml"
    # Dotted keys nest in TOML; quoted ones do not: both are Kafka's names.
    toml.write_text(f"""[client]
security.protocol = "SASL_SSL"
sasl.mechanism = "SCRAM-SHA-512"
"sasl.username" = "chaos"
sasl.password.env = "CHAOSLOG_SASL_PASSWORD"
"ssl.ca.location" = "{ca}"
""")
    assert ClientSecurity.from_file(props) == ClientSecurity.from_file(toml) == sasl_ssl(ca)


def test_defaults_and_a_password_file(tmp_path):
    assert ClientSecurity.from_data({}) == PLAINTEXT
    c = ClientSecurity.from_data({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u",
                                  "sasl.password.file": str(tmp_path / "pw")})
    assert (c.sasl_mechanism, c.password_file, c.tls) == ("PLAIN", str(tmp_path / "pw"), False)
    ssl_only = ClientSecurity.from_data({"security.protocol": "SSL",
                                         "ssl.endpoint.identification.algorithm": "none"})
    assert ssl_only.tls and not ssl_only.sasl and not ssl_only.ssl_check_hostname


@pytest.mark.parametrize("data,message", [
    ({"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": SECRET},
     "sasl.password: secrets are never written into a config or a spec; give sasl.username and "
     "sasl.password.env=VARIABLE or sasl.password.file=PATH"),
    ({"sasl": {"password": SECRET}}, "sasl.password: secrets are never written"),
    ({"sasl.jaas.config": f'PlainLoginModule required password="{SECRET}";'},
     "sasl.jaas.config: secrets are never written"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "k.jks"},
     "ssl.keystore.location: not a client setting (security.protocol, sasl.mechanism"),
    ({"security.protocol": "TLS"},
     "security.protocol='TLS': one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"},
     "sasl.mechanism='GSSAPI': one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"security.protocol": "SASL_SSL", "sasl.password.env": "X"},
     "security.protocol=SASL_SSL needs sasl.username"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u"},
     "needs one source of the password: sasl.password.env=VARIABLE or sasl.password.file=PATH"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u", "sasl.password.env": "X",
      "sasl.password.file": "f"}, "needs one source of the password"),
    ({"security.protocol": "SSL", "sasl.username": "u"},
     "sasl.username is set, but security.protocol=SSL uses no SASL: use SASL_PLAINTEXT or "
     "SASL_SSL"),
    ({"ssl.ca.location": "ca.pem"}, "ssl.ca.location is set, but security.protocol=PLAINTEXT "
                                    "uses no TLS: use SSL or SASL_SSL"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/no/such/ca.pem"},
     "ssl.ca.location=/no/such/ca.pem: no such file; name the CA certificate (PEM)"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "yes"},
     "ssl.endpoint.identification.algorithm='yes': https (check the brokers' host names) or none"),
    ({"security.protocol": 1}, "security.protocol: a text, not 1"),
])
def test_bad_settings_are_refused_naming_the_key_and_the_fix(data, message):
    with pytest.raises(ValueError) as e:
        ClientSecurity.from_data(data)
    assert message in str(e.value)
    assert SECRET not in str(e.value)


@pytest.mark.parametrize("name,content,message", [
    ("missing.properties", None, "cannot read it (No such file or directory)"),
    ("bad.properties", f"security.protocol=SASL_SSL\n{SECRET}\n", "line 2: expected KEY=VALUE"),
    ("bad.toml", "[client\n", "not TOML"),
    ("other.toml", '"security.protocol" = "SSL"\n', "a TOML client config is one [client] table"),
])
def test_a_bad_file_is_refused_without_echoing_it(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError) as e:
        ClientSecurity.from_file(path)
    assert message in str(e.value) and SECRET not in str(e.value)


# -- the password -----------------------------------------------------------------------------

def test_the_password_is_read_from_its_source_when_asked(tmp_path, monkeypatch):
    c = ClientSecurity("SASL_PLAINTEXT", username="u", password_env="CHAOSLOG_SASL_PASSWORD")
    monkeypatch.delenv("CHAOSLOG_SASL_PASSWORD", raising=False)
    with pytest.raises(ValueError, match="sasl.password.env names CHAOSLOG_SASL_PASSWORD, which "
                                         "is not set: export CHAOSLOG_SASL_PASSWORD"):
        c.password()
    monkeypatch.setenv("CHAOSLOG_SASL_PASSWORD", SECRET)
    assert c.password() == SECRET

    f = ClientSecurity("SASL_PLAINTEXT", username="u", password_file=str(tmp_path / "pw"))
    with pytest.raises(ValueError, match="pw: cannot read it .* write the SASL password into it"):
        f.password()
    (tmp_path / "pw").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        f.password()
    (tmp_path / "pw").write_text(SECRET + "\n")
    assert f.password() == SECRET


def test_the_json_names_the_source_never_the_password_and_round_trips(ca, password, tmp_path):
    c = sasl_ssl(ca)
    assert c.to_json() == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                           "sasl.username": "chaos",
                           "sasl.password.env": "CHAOSLOG_SASL_PASSWORD",
                           "ssl.endpoint.identification.algorithm": "https",
                           "ssl.ca.location": ca}
    assert SECRET not in repr(c)
    for each in (c, PLAINTEXT, sasl_ssl(ca, password_env=None, password_file=str(tmp_path / "pw"),
                                        ssl_check_hostname=False)):
        assert ClientSecurity.from_json(json.loads(json.dumps(each.to_json()))) == each
    assert PLAINTEXT.to_json() == {"security.protocol": "PLAINTEXT"}


# -- each client's settings ----------------------------------------------------------------

def test_plaintext_changes_no_client():
    assert PLAINTEXT.confluent_config() == {}
    assert PLAINTEXT.kafka_python_kwargs() == {}
    assert PLAINTEXT.aiokafka_kwargs() == {}


def test_the_three_clients_get_their_own_names(ca, password):
    c = sasl_ssl(ca)
    assert c.confluent_config() == {
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "chaos", "sasl.password": SECRET, "ssl.ca.location": ca,
        "ssl.endpoint.identification.algorithm": "https"}
    assert c.kafka_python_kwargs() == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "chaos", "sasl_plain_password": SECRET, "ssl_cafile": ca,
        "ssl_check_hostname": True}
    aio = c.aiokafka_kwargs()
    context = aio.pop("ssl_context")
    assert aio == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                   "sasl_plain_username": "chaos", "sasl_plain_password": SECRET}
    assert context.check_hostname
    assert [dict(rdn[0] for rdn in cert["subject"])["commonName"]
            for cert in context.get_ca_certs()] == ["chaoslog-test-ca"]


def test_the_names_are_the_libraries_own():
    """Every keyword the mappings give is one the library takes."""
    import inspect

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafka import KafkaConsumer, KafkaProducer
    names = {"security_protocol", "sasl_mechanism", "sasl_plain_username",
             "sasl_plain_password"}
    for cls in (KafkaProducer, KafkaConsumer):
        assert names | {"ssl_cafile", "ssl_check_hostname"} <= set(cls.DEFAULT_CONFIG)
    for cls in (AIOKafkaProducer, AIOKafkaConsumer):
        assert names | {"ssl_context"} <= set(inspect.signature(cls).parameters)


def test_tls_without_sasl_or_hostname_check(ca):
    c = ClientSecurity("SSL", ssl_ca_location=ca, ssl_check_hostname=False)
    assert c.confluent_config() == {"security.protocol": "SSL", "ssl.ca.location": ca,
                                    "ssl.endpoint.identification.algorithm": "none"}
    assert c.kafka_python_kwargs() == {"security_protocol": "SSL", "ssl_cafile": ca,
                                       "ssl_check_hostname": False}
    context = c.ssl_context()
    assert not context.check_hostname and len(context.get_ca_certs()) == 1
    # No CA named: the system's CAs, the host name checked.
    assert ClientSecurity("SSL").ssl_context().check_hostname


# -- the run's spec ---------------------------------------------------------------------------

def test_a_spec_carries_the_settings_but_not_the_password(ca, password):
    spec = external(sasl_ssl(ca)).validate()
    text = json.dumps(spec.to_json())
    assert SECRET not in text and '"sasl.password.env": "CHAOSLOG_SASL_PASSWORD"' in text
    assert RunSpec.from_json(json.loads(text)).client == spec.client
    assert RunSpec.from_json(json.loads(json.dumps(RunSpec().to_json()))).client == PLAINTEXT
    # A campaign's [client] table: TOML's dotted keys nest.
    nested = {"client": {"security": {"protocol": "SASL_SSL"},
                         "sasl": {"mechanism": "SCRAM-SHA-512", "username": "chaos",
                                  "password": {"env": "CHAOSLOG_SASL_PASSWORD"}},
                         "ssl.ca.location": ca}}
    assert RunSpec.from_data(nested).client == spec.client
    with pytest.raises(Refused, match="client: sasl.password: secrets are never written"):
        RunSpec.from_data({"client": {"security.protocol": "SASL_SSL", "sasl.password": SECRET}})


def test_validate_refuses_what_the_settings_cannot_do(ca, monkeypatch):
    """Settings are for a cluster the harness did not start (a built-in one
    makes its clients' own), and the password must be there."""
    monkeypatch.delenv("CHAOSLOG_SASL_PASSWORD", raising=False)
    for spec, message in [
        (external(sasl_ssl(ca)),
         "--client-config: sasl.password.env names CHAOSLOG_SASL_PASSWORD, which is not set"),
        (RunSpec(backend="local", client=ClientSecurity("SSL")),
         "--client-config goes with --target external, a cluster chaoslog did not start; the "
         "chaoslog target's clients connect as chaoslog set it up"),
    ]:
        with pytest.raises(Refused) as e:
            spec.validate()
        assert message in str(e.value)


class SecureCluster:
    """A started cluster of no nodes that made its clients' settings."""
    backend, system, has_zookeeper = "local", "chaoslog", False

    def __init__(self, client_security):
        from harness.backends.base import ClusterSpec
        self.spec = ClusterSpec(brokers=0)
        self.client_security = client_security


def test_a_run_s_clients_take_its_settings_else_the_cluster_s(tmp_path, ca):
    from harness.run import Run
    made = ClientSecurity("SSL", ssl_ca_location=ca)
    given = ClientSecurity("SSL", ssl_check_hostname=False)
    for cluster, security, expected in [(SecureCluster(made), PLAINTEXT, made),
                                        (SecureCluster(made), given, given),
                                        (SecureCluster(None), PLAINTEXT, PLAINTEXT)]:
        with Run(tmp_path / str(len(list(tmp_path.iterdir()))), cluster,
                 security=security) as run:
            assert run.security == expected


# -- the command line and the workers ---------------------------------------------------------

def test_run_takes_a_client_config(tmp_path, ca):
    path = tmp_path / "client.properties"
    path.write_text(f"security.protocol=SASL_SSL\nsasl.username=chaos\n"
                    f"sasl.password.env=CHAOSLOG_SASL_PASSWORD\nssl.ca.location={ca}\n")
    spec = run_cli.spec_of_options(args("run", "--client-config", str(path)))
    assert spec.client == sasl_ssl(ca, sasl_mechanism="PLAIN")
    assert run_cli.spec_of_options(args("run")).client == PLAINTEXT


def test_an_external_cluster_is_listed_with_the_settings(tmp_path, ca, monkeypatch):
    import harness.backends.external as external_backend
    asked = []

    def discover(bootstrap, timeout=None, security=None):
        asked.append(security)
        return {1: ("h", 9093), 2: ("h", 9094), 3: ("h", 9095)}
    monkeypatch.setattr(external_backend, "discover", discover)
    path = tmp_path / "client.properties"
    path.write_text(f"security.protocol=SSL\nssl.ca.location={ca}\n")
    spec = run_cli.spec_of_options(args("run", "--target", "external", "--bootstrap", "h:9093",
                                        "--client-config", str(path)))
    assert asked == [spec.client] == [ClientSecurity("SSL", ssl_ca_location=ca)]


@pytest.mark.parametrize("content,message", [
    (None, "--client-config {path}: cannot read it (No such file or directory)"),
    (f"security.protocol=SASL_SSL\nsasl.username=u\nsasl.password={SECRET}\n",
     "--client-config {path}: sasl.password: secrets are never written into a config or a spec"),
    ("security.protocol=SASL_PLAINTEXT\nsasl.username=u\nsasl.password.env=X\n",
     "--client-config goes with --target external"),
])
def test_a_bad_client_config_is_refused_in_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "client.properties"
    if content is not None:
        path.write_text(content)
    assert cli("run", "--backend", "local", "--client-config", str(path)) == EXIT_REFUSED
    err = capsys.readouterr().err.strip()
    assert message.format(path=path) in err and len(err.splitlines()) == 1, err
    assert SECRET not in err and "Traceback" not in err


class Handle:
    """A worker that exits at once."""

    def __init__(self, name):
        self.name = name

    def lines(self):
        return iter(())

    def wait(self, timeout):
        return 0

    def terminate(self):
        pass

    kill = terminate


def test_workers_get_the_source_never_the_password(ca, password, tmp_path):
    from harness.history import HistoryRecorder
    launched = []

    def launch(name, argv):
        launched.append(argv)
        return Handle(name)

    recorder = HistoryRecorder(tmp_path / "history.jsonl")
    settings = sasl_ssl(ca)
    w = Workload(recorder, "127.0.0.1:9", WorkloadSpec({"t": 2}, producers=1, consumers=1),
                 launcher=launch, security=settings)
    w.start()
    w.final_reads(timeout=0.1)
    w.stop(drain_s=0)
    recorder.close()
    assert {argv[0] for argv in launched} == {"producer", "consumer", "final"}
    for argv in launched:
        assert SECRET not in " ".join(argv)
        assert build_parser().parse_args(argv).security == settings
    # Without settings the workers' command lines are as they were.
    w = Workload(HistoryRecorder(tmp_path / "h2.jsonl"), "127.0.0.1:9", WorkloadSpec({"t": 1}),
                 launcher=launch)
    launched.clear()
    w.start()
    w.stop(drain_s=0)
    assert launched and all("--security" not in argv for argv in launched)
    assert build_parser().parse_args(launched[0]).security == PLAINTEXT


def test_every_client_kind_is_built_with_the_settings(ca):
    """The raw fetcher keeps them for its own connections (harness/kafka_wire.py)."""
    from harness.workload.clients import make_consumer
    settings = ClientSecurity("SSL", ssl_ca_location=ca)
    assert make_consumer("raw", "127.0.0.1:9", "t", 0, "c", security=settings).security == settings


# -- campaigns --------------------------------------------------------------------------------

def test_a_campaign_s_client_table_reaches_every_run(ca):
    d = {"campaign": {"name": "c"}, "client": {"security": {"protocol": "SSL"},
                                               "ssl.ca.location": ca},
         "axes": {"faults": {"kills": {"schedule": {"faults": ["kill"]}},
                             "pauses": {"schedule": {"faults": ["pause"]}}}}}
    c = Campaign.from_dict(d, "c.toml")
    for i in range(2):
        assert RunSpec.from_data(c.plan(i).fields).client == ClientSecurity("SSL",
                                                                            ssl_ca_location=ca)
    with pytest.raises(CampaignError, match=r"\[client\] and \[base.client\] both"):
        Campaign.from_dict({**d, "base": {"client": {}}}, "c.toml")
