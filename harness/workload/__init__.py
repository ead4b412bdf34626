"""Workloads: producer and consumer workers as processes of their own, and the
harness side that starts them and turns their reports into the history.

Workers talk to the cluster with real Kafka clients (confluent-kafka by
default, kafka-python or aiokafka on request) and report what they saw as JSON lines on
stdout; they know nothing of the history's global numbering. The harness
(runner.Workload) assigns index, time, op and process ids when a line
arrives. That split lets a worker run anywhere a Python and the clients exist
(a local subprocess, a container of the broker image) with only argv and
stdout.
"""
from harness.workload.runner import FinalReads, Workload, WorkloadSpec

__all__ = ["FinalReads", "Workload", "WorkloadSpec"]
