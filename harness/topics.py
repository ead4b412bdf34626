"""Topics created as an application's operator creates them: with the Kafka
AdminClient (CreateTopics), not by writing ZooKeeper.

A run's topics go through the cluster's own admin API
(docs/design.md#admin-api), so every run exercises it: the request reaches
the controller, which checks it, writes the assignment and answers once the
leaders are elected. A broker that is not (or no longer) the controller
answers NOT_CONTROLLER and the client asks again, as a real application's
client would; the request is retried until `timeout_s`.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from contracts.deadline import Deadline, wait_until
from harness.security import PLAINTEXT, ClientSecurity

# Errors after which asking again may succeed: the controller moved or is
# still being elected, or the answer was lost.
RETRIABLE = frozenset({"NOT_CONTROLLER", "REQUEST_TIMED_OUT", "_TIMED_OUT", "_TRANSPORT",
                       "BROKER_NOT_AVAILABLE", "_ALL_BROKERS_DOWN", "LEADER_NOT_AVAILABLE",
                       "_WAIT_COORD", "COORDINATOR_NOT_AVAILABLE"})


class TopicError(RuntimeError):
    """The cluster refused a topic, or did not answer in time."""


def create_topics(bootstrap: str, topics: Mapping[str, int], replication_factor: int,
                  assignment: Mapping[str, Mapping[int, list[int]]] | None = None,
                  timeout_s: float = 60.0, security: ClientSecurity = PLAINTEXT) -> None:
    """Create `topics` (name -> partitions) with `replication_factor`
    replicas each, or the replicas `assignment` names (topic -> partition ->
    broker ids, the first the preferred leader). Returns once the controller
    answered that each exists; a topic that exists already counts only when
    an earlier attempt of this call may have created it."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    client = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                          **security.confluent_config()})
    wanted = {}
    for topic, n in topics.items():
        plan = (assignment or {}).get(topic)
        wanted[topic] = (NewTopic(topic, n, replica_assignment=[list(plan[p]) for p in range(n)])
                         if plan else NewTopic(topic, n, replication_factor))
    deadline = Deadline(timeout_s)
    attempts = 0
    last: dict[str, str] = {}

    def attempt() -> bool:
        nonlocal attempts
        budget = max(1.0, min(deadline.remaining(), 30.0))
        futures = client.create_topics(list(wanted.values()), operation_timeout=budget,
                                       request_timeout=budget + 5.0)
        attempts += 1
        for topic, future in futures.items():
            try:
                future.result()
            except KafkaException as e:
                err = e.args[0]
                name = err.name()
                # Existing after an earlier attempt: that attempt's answer was lost, not its write.
                made_earlier = name == "TOPIC_ALREADY_EXISTS" and attempts > 1
                if not made_earlier:
                    if name not in RETRIABLE and not err.retriable():
                        raise TopicError(f"topic {topic!r} refused: {name}: {err.str()}") from None
                    last[topic] = f"{name}: {err.str()}"
                    continue
            wanted.pop(topic)
        return not wanted

    if not wait_until(attempt, timeout_s, 0.5):
        raise TopicError(f"topics {', '.join(sorted(wanted))} not created within {timeout_s:g} s: "
                         + "; ".join(f"{t}: {e}" for t, e in sorted(last.items())))


def wait_for_leaders(cluster: Any, topics: Iterable[str], timeout_s: float = 60.0) -> None:
    """Until the brokers' Metadata shows a leader for every partition of
    `topics` (a target without ZooKeeper; the built-in clusters are read in
    ZooKeeper by cluster.admin.wait_for_leaders)."""
    names = sorted(topics)
    last = "no broker answered"

    def led() -> bool:
        nonlocal last
        md = cluster.kafka_metadata(names)
        parts = {t: [p for (tt, _), p in md.partitions.items() if tt == t] for t in names}
        waiting = [f"{t}: no partitions" for t, ps in parts.items() if not ps]
        waiting += [f"{p.topic}/{p.partition}: no leader" for ps in parts.values() for p in ps
                    if p.leader < 0 or p.error]
        last = "; ".join(waiting[:5])
        return not waiting

    if not wait_until(led, timeout_s, 0.5, retry_on=(Exception,)):
        raise TopicError(f"topics {', '.join(names)} without leaders after {timeout_s:g} s: {last}")
