"""Is a failed send `fail` (certainly not written) or `info` (unknown)?

The history's whole value rests on this: a `fail` that was in fact written
makes the checker report an aborted read that is the harness's fault, and an
`info` costs only precision. So `fail` is reserved for

  * errors raised before the message ever left the client (never_sent), and
  * refusals that depend only on the message itself (too large, invalid
    topic name, bad acks, a CRC the broker rejects): every attempt of the
    same bytes gets the same answer, so no earlier attempt can have landed;
  * refusals that depend on the cluster's state at that moment
    (NOT_ENOUGH_REPLICAS, UNKNOWN_TOPIC_OR_PART, ...) — the broker refused
    *this* attempt before appending — but only when the client makes exactly
    one attempt. With retries, an earlier attempt may have timed out after
    being appended, and the client reports only the last attempt's error.
    librdkafka never promises one attempt: when a Metadata response drops a
    broker it re-sends that broker's in-flight requests without counting a
    retry (librdkafka >= 2.10), so its state refusals are always `info`.
    Idempotence does not save us: the leader checks min.insync.replicas
    before its duplicate detection.

NOT_LEADER_FOR_PARTITION is never `fail`: a leader that becomes a follower
answers it to produce requests it had already appended and was holding for
the high watermark (as Kafka does), and those may yet be committed.

Everything else — timeouts, lost connections, NOT_ENOUGH_REPLICAS_AFTER_APPEND
(written, just not replicated enough), storage errors, anything unknown — is
`info`.
"""
from __future__ import annotations

TIMEOUT = "timeout"

# Names from librdkafka (confluent-kafka: KafkaError.name()) and from
# kafka-python (exception classes' `message`), mapped to one spelling.
ALIASES = {
    "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
    "UNKNOWN_TOPIC_OR_PARTITION": "UNKNOWN_TOPIC_OR_PART",
    "MESSAGE_TOO_LARGE": "MSG_SIZE_TOO_LARGE",
    "MESSAGE_SIZE_TOO_LARGE": "MSG_SIZE_TOO_LARGE",
    "INVALID_TOPIC": "INVALID_TOPIC_EXCEPTION",
}

TIMEOUTS = frozenset({"_MSG_TIMED_OUT", "_TIMED_OUT", "REQUEST_TIMED_OUT", "_TIMED_OUT_QUEUE",
                      "KafkaTimeoutError", "RequestTimedOutError"})

# The same bytes always get the same refusal.
DETERMINISTIC = frozenset({
    "MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE",
    "INVALID_TOPIC_EXCEPTION", "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
    "INVALID_REQUIRED_ACKS", "CORRUPT_MESSAGE", "INVALID_RECORD", "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    "_INVALID_ARG", "_KEY_SERIALIZATION", "_VALUE_SERIALIZATION",
})

# Refused before appending, depending on the cluster's state right then.
STATE_REFUSALS = frozenset({
    "NOT_ENOUGH_REPLICAS", "UNKNOWN_TOPIC_OR_PART",
    "LEADER_NOT_AVAILABLE", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC",
})

# Never handed to a broker at all, whatever the retries.
NEVER_SENT = frozenset({"_QUEUE_FULL", "_PURGE_QUEUE"})


def canonical(name: str) -> str:
    """One spelling per error; every timeout is `timeout`."""
    name = ALIASES.get(name, name)
    if name in TIMEOUTS:
        return TIMEOUT
    return name


def classify_send(name: str, *, single_attempt: bool, never_sent: bool = False) -> tuple[str, str]:
    """("fail" | "info", canonical error name) for a send that did not succeed.
    `single_attempt`: the client sends each message at most once (kafka-python
    with retries = 0; never librdkafka); `never_sent`: the error came before
    the client accepted the message."""
    c = canonical(name)
    raw = ALIASES.get(name, name)
    if never_sent or raw in NEVER_SENT:
        return "fail", c
    if raw in DETERMINISTIC:
        return "fail", c
    if raw in STATE_REFUSALS and single_attempt:
        return "fail", c
    return "info", c


def kafka_python_name(exc: BaseException) -> str:
    """kafka-python errors carry the protocol name in `message`
    (NotEnoughReplicasError.message == 'NOT_ENOUGH_REPLICAS')."""
    msg = getattr(type(exc), "message", None)
    if isinstance(msg, str) and msg and msg.upper() == msg:
        return msg
    return type(exc).__name__
