#!/usr/bin/env bash
# Everything chaoslog needs on a fresh Debian 12 machine, each step skipped in
# seconds when it is already done: system packages, the .venv, the images.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "[setup] $*" >&2; }

# System packages: mmdebstrap builds the images' root filesystem; Java and
# Debian's ZooKeeper jars serve the local backend, Java also PySpark. kcat,
# Go and Debian's sarama and kafka-go sources are the non-Python clients of
# tests/cluster/server/test_foreign_clients_e2e.py (built offline from
# /usr/share/gocode). openssl makes each secure cluster's certificates
# (harness/certificates.py).
pkgs=(mmdebstrap openjdk-17-jre-headless libzookeeper-java liblog4j1.2-java libslf4j-java
      openssl kcat golang-go golang-github-shopify-sarama-dev golang-github-segmentio-kafka-go-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    say "missing packages: ${missing[*]}; run as root or: sudo apt-get install -y ${missing[*]}"
    exit 1
  fi
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The virtualenv, re-installed only when pyproject.toml changes.
stamp=.venv/.chaoslog-installed
want=$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "creating .venv and installing the pinned dependencies (a few minutes the first time)"
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check 'wheel==0.45.1'
  .venv/bin/pip install --quiet --disable-pip-version-check -e '.[harness,test]'
  echo "$want" > "$stamp"
fi

# The images, when there is a Docker engine (cached by a hash of their inputs).
if docker info >/dev/null 2>&1; then
  .venv/bin/python -m harness.images_cli >/dev/null
else
  say "no Docker engine answers: the local backend will be used"
fi
