"""cluster/security.py and the security keys of cluster/config.py: a broker
config that cannot be used is refused at startup with the key named, and
the broker's own password is read from its file once (pure, no sockets;
the certificates come from harness/certificates.py's openssl)."""
from __future__ import annotations

import pytest

from cluster.config import BrokerConfig, ConfigError
from harness.certificates import make_certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("tls"), [])


@pytest.mark.parametrize("overrides, message", [
    ({"security.inter.broker.protocol": "TLS"}, "use one of PLAINTEXT, SSL"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
    ({"sasl.enabled.mechanisms": "PLAIN"}, "must be one of sasl.enabled.mechanisms"),
    ({"ssl.keystore.type": "JKS"}, "only PEM"),
    ({"security.inter.broker.protocol": "SSL"}, "needs ssl.keystore.location"),
    ({"security.inter.broker.protocol": "SASL_PLAINTEXT"}, "needs sasl.inter.broker.username"),
])
def test_unusable_settings_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_dict(overrides)


def test_the_password_file_is_read_once_and_never_shown(tmp_path, certs):
    pw = tmp_path / "pw"
    pw.write_text("s3cret-value\n")
    cfg = BrokerConfig.from_dict({
        "security.inter.broker.protocol": "SASL_SSL", "sasl.inter.broker.username": "broker",
        "sasl.inter.broker.password.file": str(pw),
        "ssl.keystore.location": str(certs.keystore), "ssl.truststore.location": str(certs.ca)})
    security = cfg.security
    assert security.password == "s3cret-value" and security.sasl
    assert "s3cret-value" not in repr(security) and "s3cret-value" not in cfg.render()
    pw.write_text("changed")
    assert cfg.security.password == "s3cret-value"          # made once, at startup
    assert security.server_ssl is not None and security.client_ssl is not None


@pytest.mark.parametrize("what, message", [("missing", "No such file"), ("empty", "is empty"),
                                           ("keystore", "not a PEM key and certificate chain")])
def test_unreadable_files_are_refused_with_the_key(tmp_path, certs, what, message):
    pw = tmp_path / "pw"
    if what != "missing":
        pw.write_text("" if what == "empty" else "x")
    cfg = BrokerConfig.from_dict({
        "security.inter.broker.protocol": "SASL_SSL", "sasl.inter.broker.username": "broker",
        "sasl.inter.broker.password.file": str(pw),
        "ssl.keystore.location": str(certs.ca if what == "keystore" else certs.keystore)})
    with pytest.raises(ConfigError, match=message):
        cfg.security   # noqa: B018 - made on first use


def test_plaintext_needs_nothing():
    security = BrokerConfig.from_dict({}).security
    assert security.protocol == "PLAINTEXT" and not security.sasl and not security.password
    assert security.server_ssl is None and security.client_ssl is None
