"""Reproducer of commit-regressed, inconsistent-offset shrunk by `chaoslog shrink` from /tmp/nights/fixed/runs/0024:
1 fault(s), 45 s; it reproduced in 2 of 2 confirming tries.
It fails while the anomaly is there."""
import json
from dataclasses import replace

import pytest

from harness.run import RunSpec, execute

SPEC = json.loads(r"""{
 "backend": "docker",
 "checker": "reference",
 "cluster": {
  "broker_config": {
   "min.insync.replicas": "2",
   "replication.truncation": "leader-epoch",
   "unclean.leader.election.enable": "false"
  },
  "brokers": 3,
  "name": "chaoslog",
  "proxied": false,
  "zk_session_timeout_ms": 6000,
  "zookeepers": 1
 },
 "final_timeout_s": 60.0,
 "mechanism": "auto",
 "quiet_s": 10.0,
 "replication_factor": 3,
 "schedule": {
  "duration_s": 45.0,
  "final": {
   "final_reads_at_s": 55.0,
   "heal_at_s": 45.0
  },
  "quiet_s": 10.0,
  "seed": 631825231,
  "settings": {
   "brokers": 3,
   "fault_duration_s": [
    4.0,
    12.0
   ],
   "faults": {
    "bad-offset": 1.0,
    "bitflip": 1.0,
    "kill": 1.0,
    "lose-unfsynced": 2.0,
    "move-leader": 1.0,
    "stop": 1.0,
    "truncate-tail": 2.0,
    "zk-expire": 1.0
   },
   "interval_s": [
    2.0,
    6.0
   ],
   "overlap": 1,
   "replication_factor": 3,
   "zookeepers": 1
  },
  "steps": [
   {
    "at_s": 19.3,
    "chain": null,
    "duration_s": 9.3,
    "fault": "lose-unfsynced",
    "lane": 0,
    "params": {},
    "recipe": null,
    "target": "all"
   }
  ]
 },
 "settle_s": 10.0,
 "workload": {
  "acks": "mixed",
  "client": "confluent",
  "commit": "manual",
  "consumers": 1,
  "crash_every_s": 30.0,
  "fetchers": 1,
  "idempotence": false,
  "mix": [
   {
    "acks": "all",
    "delivery_timeout_ms": 15000,
    "idempotent": true,
    "max_in_flight": 5,
    "request_timeout_ms": 5000,
    "retries": 2147483647
   },
   {
    "acks": "all",
    "delivery_timeout_ms": 15000,
    "idempotent": false,
    "max_in_flight": 1,
    "request_timeout_ms": 5000,
    "retries": 0
   },
   {
    "acks": "1",
    "delivery_timeout_ms": 15000,
    "idempotent": false,
    "max_in_flight": 1,
    "request_timeout_ms": 5000,
    "retries": 0
   }
  ],
  "partitions": [
   "t0/0",
   "t0/1",
   "t1/0",
   "t1/1"
  ],
  "poll_rate": 0.0,
  "producer": {
   "acks": "all",
   "delivery_timeout_ms": 15000,
   "idempotent": false,
   "max_in_flight": 1,
   "request_timeout_ms": 5000,
   "retries": 0
  },
  "producers": 3,
  "rate": 200.0,
  "slots": 4,
  "sub_via": "subscribe",
  "topics": {
   "t0": 2,
   "t1": 2
  }
 }
}""")
ANOMALIES = set(['commit-regressed', 'inconsistent-offset'])


@pytest.mark.docker
def test_the_shrunk_run_finds_no_commit_regressed_or_inconsistent_offset(tmp_path):
    result = execute(replace(RunSpec.from_json(SPEC), out=tmp_path / "run"))
    summary = getattr(result.verdict, "summary", None)
    assert summary, f"the run could not be judged (exit {result.exit_code}): see {tmp_path}"
    found = set(summary.get("fatal") or []) & ANOMALIES
    assert not found, f"{sorted(found)} again: see {tmp_path / 'run' / 'report.html'}"
