"""Reproducer of inconsistent-offset, lost, replica-divergence shrunk by `chaoslog shrink` from /tmp/nights/seed-faithful/runs/0005:
2 fault(s), 45 s; it reproduced in 2 of 2 confirming tries.
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
   "min.insync.replicas": "1",
   "replication.truncation": "hw",
   "unclean.leader.election.enable": "true"
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
 "replication_factor": 2,
 "schedule": {
  "duration_s": 45.0,
  "final": {
   "final_reads_at_s": 55.0,
   "heal_at_s": 45.0
  },
  "quiet_s": 10.0,
  "seed": 696095985,
  "settings": {
   "brokers": 3,
   "fault_duration_s": [
    4.0,
    12.0
   ],
   "faults": {
    "isr-shrink-then-leader-loss": 1.0,
    "kill": 2.0,
    "partition-isolate": 2.0,
    "pause": 1.0,
    "restarted-follower-elected": 1.0,
    "zk-expire": 1.0
   },
   "interval_s": [
    3.0,
    8.0
   ],
   "lag_s": 10.0,
   "overlap": 2,
   "replication_factor": 2,
   "zookeepers": 1
  },
  "steps": [
   {
    "at_s": 6.2,
    "chain": 0,
    "duration_s": 17.6,
    "fault": "partition-isolate",
    "lane": 0,
    "params": {
     "among": "brokers"
    },
    "recipe": "isr-shrink-then-leader-loss",
    "target": "leader"
   },
   {
    "at_s": 22.2,
    "chain": 0,
    "duration_s": 6.9,
    "fault": "kill",
    "lane": 2,
    "params": {},
    "recipe": "isr-shrink-then-leader-loss",
    "target": "leader"
   }
  ]
 },
 "settle_s": 10.0,
 "workload": {
  "acks": "mixed",
  "client": "confluent",
  "commit": "manual",
  "consumers": 1,
  "crash_every_s": 0.0,
  "fetchers": 1,
  "idempotence": false,
  "mix": [
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
   "t/0",
   "t/1"
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
  "producers": 2,
  "rate": 200.0,
  "slots": 4,
  "sub_via": "assign",
  "topics": {
   "t": 2
  }
 }
}""")
ANOMALIES = set(['inconsistent-offset', 'lost', 'replica-divergence'])


@pytest.mark.docker
def test_the_shrunk_run_finds_no_inconsistent_offset_or_lost_or_replica_divergence(tmp_path):
    result = execute(replace(RunSpec.from_json(SPEC), out=tmp_path / "run"))
    summary = getattr(result.verdict, "summary", None)
    assert summary, f"the run could not be judged (exit {result.exit_code}): see {tmp_path}"
    found = set(summary.get("fatal") or []) & ANOMALIES
    assert not found, f"{sorted(found)} again: see {tmp_path / 'run' / 'report.html'}"
