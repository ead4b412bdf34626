"""Produce throughput and latency against a 3-broker chaoslog cluster (RF 3)
and against a trivial sink, with confluent-kafka's producer.

    .venv/bin/python bench/bench_produce.py [--messages N] [--quick]

Cases: acks=all and acks=1, 100-byte and 1 KiB values, one partition with
replicas on all three brokers. The sink is a minimal server (a separate
process running this file's `sink` function) that acks every Produce
without storing anything: the ceiling of this machine for this client and a
Python asyncio server. Each case runs twice: as fast as possible
(throughput; its latencies are mostly time queued in the client) and paced
at --rate messages/s (latency under a moderate load). Latency is per
message, from produce() to its delivery callback. Prints a table and writes
runs/bench/produce-<date>.json (produce-<date>-quick.json for --quick)
with the machine description.

The cluster is real, started by the harness's local backend
(harness.backends.local.LocalCluster): ZooKeeper (java) and three
`python -m cluster.broker` processes with min.insync.replicas=2. Each case's
topic is created with the admin (1 partition, replication factor 3, replicas
assigned round-robin over the live brokers as Kafka's AdminUtils does) and
the brokers' controller elects its leader.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import multiprocessing
import os
import platform
import struct
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.paths import RAW  # noqa: E402


# -- the sink ---------------------------------------------------------------------------

def sink(port: int, ready) -> None:
    """Answer ApiVersions, Metadata and Produce; drop the records."""
    from kafka.protocol.metadata import MetadataResponse
    from kafka.protocol.producer import ProduceResponse

    from cluster.protocol import api
    from cluster.protocol.frame import frame_response, parse_request_header
    offsets: dict[tuple[str, int], int] = {}

    def handle(frame: bytes):
        hdr = parse_request_header(frame)
        k, v = hdr.api_key, hdr.api_version
        if k == api.API_VERSIONS:
            if not api.is_supported(k, v):
                return frame_response(hdr.correlation_id, api.api_versions_body(0, 35))
            return frame_response(hdr.correlation_id, api.api_versions_body(v))
        req = api.decode_request(k, v, frame, hdr.body_offset)
        if k == api.METADATA:
            names = [t.name for t in req.topics or []]
            brokers = [(1, "127.0.0.1", port, None)] if v >= 1 else [(1, "127.0.0.1", port)]
            topics = [(0, n, False, [(0, 0, 1, [1], [1])]) if v >= 1 else (0, n, [(0, 0, 1, [1], [1])])
                      for n in names]
            kw = {"brokers": brokers, "topics": topics}
            if v >= 1:
                kw["controller_id"] = 1
            if v >= 2:
                kw["cluster_id"] = "sink"
            if v >= 3:
                kw["throttle_time_ms"] = 0
            return frame_response(hdr.correlation_id,
                                  api.encode_response(k, v, MetadataResponse(version=v, **kw)))
        if k == api.PRODUCE:
            out = []
            for td in req.topic_data:
                parts = []
                for pd in td.partition_data:
                    n = 0
                    data = pd.records or b""
                    pos = 0
                    while pos + 61 <= len(data):  # count records from v2 headers
                        length = struct.unpack_from(">i", data, pos + 8)[0]
                        n += struct.unpack_from(">i", data, pos + 57)[0]
                        pos += 12 + length
                    base = offsets.get((td.name, pd.index), 0)
                    offsets[(td.name, pd.index)] = base + n
                    parts.append((pd.index, 0, base, -1) if v >= 2 else (pd.index, 0, base))
                out.append((td.name, parts))
            if req.acks == 0:
                return None
            kw = {"responses": out}
            if v >= 1:
                kw["throttle_time_ms"] = 0
            return frame_response(hdr.correlation_id,
                                  api.encode_response(k, v, ProduceResponse(version=v, **kw)))
        return None

    async def serve(reader, writer):
        try:
            while True:
                (n,) = struct.unpack(">i", await reader.readexactly(4))
                resp = handle(await reader.readexactly(n))
                if resp is not None:
                    writer.write(resp)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", port)
        ready.set()
        async with server:
            await server.serve_forever()
    asyncio.run(main())


# -- the producer side ---------------------------------------------------------------------

def run_case(bootstrap: str, topic: str, acks: str, size: int, n: int,
             rate: float = 0.0) -> dict:
    """Produce n messages as fast as possible (rate 0: throughput), or paced
    at `rate` messages a second (latency under a moderate load)."""
    import confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                     "queue.buffering.max.messages": 200000})
    value = os.urandom(size)
    lat: list[float] = []
    errors = [0]
    clock = time.perf_counter

    def make_cb(t0):
        def cb(err, msg):
            if err:
                errors[0] += 1
            else:
                lat.append(clock() - t0)
        return cb
    # warm up: metadata, connections
    p.produce(topic, value=value, partition=0)
    p.flush(30)
    start = clock()
    for i in range(n):
        if rate:
            due = start + i / rate
            while (now := clock()) < due:
                p.poll(min(0.001, due - now))
        while True:
            try:
                p.produce(topic, value=value, partition=0, on_delivery=make_cb(clock()))
                break
            except BufferError:
                p.poll(0.001)
        p.poll(0)
    p.flush(120)
    elapsed = clock() - start
    lat.sort()

    def q(f):
        return round(lat[min(len(lat) - 1, int(f * len(lat)))] * 1000, 2) if lat else None
    return {"mode": f"paced {rate:g}/s" if rate else "max", "acks": acks, "size": size,
            "messages": n, "errors": errors[0], "seconds": round(elapsed, 3),
            "msgs_per_s": round(n / elapsed), "mb_per_s": round(n * size / elapsed / 1e6, 2),
            "p50_ms": q(0.50), "p99_ms": q(0.99)}


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        mem = int(open("/proc/meminfo").readline().split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    import confluent_kafka
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_mib": mem,
            "kernel": platform.release(), "python": platform.python_version(),
            "confluent_kafka": confluent_kafka.version()[0],
            "librdkafka": confluent_kafka.libversion()[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=0, help="messages per case (default: "
                    "50000 for 100 B, 20000 for 1 KiB)")
    ap.add_argument("--quick", action="store_true", help="10x fewer messages")
    ap.add_argument("--rate", type=float, default=2000,
                    help="messages/s of the paced (latency) runs")
    args = ap.parse_args()

    from cluster import admin
    from harness.backends.base import ClusterSpec
    from harness.backends.local import LocalCluster, free_port

    cases = [(acks, size) for size in (100, 1024) for acks in ("all", "1")]

    def paced(size):
        return max(200, int(args.rate * (0.5 if args.quick else 3)))

    def count(size):
        n = args.messages or (50000 if size <= 100 else 20000)
        return max(1000, n // 10) if args.quick else n

    results = {"sink": [], "cluster": []}
    # The ceiling: a sink that acks everything.
    port = free_port()
    ready = multiprocessing.Event()
    proc = multiprocessing.Process(target=sink, args=(port, ready), daemon=True)
    proc.start()
    try:
        ready.wait(30)
        for acks, size in cases:
            for rate, n in ((0, count(size)), (args.rate, paced(size))):
                r = run_case(f"127.0.0.1:{port}", f"sink-{acks}-{size}", acks, size, n, rate)
                results["sink"].append(r)
                print("sink   ", r, flush=True)
    finally:
        proc.terminate()
        proc.join(5)

    cluster = LocalCluster(ClusterSpec(name=f"bench-produce-{os.getpid()}", brokers=3,
                                       zookeepers=1,
                                       broker_config={"min.insync.replicas": 2}))
    leaders = {}
    try:
        cluster.start()
        zk = admin.connect(cluster.zookeeper_connect)
        try:
            boot = cluster.bootstrap_servers
            for acks, size in cases:
                topic = f"bench-{acks}-{size}"
                admin.create_topic(zk, topic, 1, 3)
                desc = admin.wait_for_leaders(zk, topic, timeout=60)
                part = desc["partitions"][0]
                leaders[topic] = part["leader"]
                print(f"topic {topic}: leader {part['leader']}, replicas {part['replicas']}, "
                      f"isr {part['isr']}", flush=True)
                for rate, n in ((0, count(size)), (args.rate, paced(size))):
                    r = run_case(boot, topic, acks, size, n, rate)
                    results["cluster"].append(r)
                    print("cluster", r, flush=True)
        finally:
            zk.stop()
            zk.close()
    finally:
        cluster.destroy()

    print()
    print(f"{'target':8} {'mode':13} {'acks':4} {'size':>5} {'msgs':>7} {'msg/s':>8} "
          f"{'MB/s':>7} {'p50 ms':>7} {'p99 ms':>7}")
    for target in ("sink", "cluster"):
        for r in results[target]:
            print(f"{target:8} {r['mode']:13} {r['acks']:4} {r['size']:>5} {r['messages']:>7} "
                  f"{r['msgs_per_s']:>8} {r['mb_per_s']:>7} {r['p50_ms']!s:>7} "
                  f"{r['p99_ms']!s:>7}")
    # A --quick run does not overwrite the day's full run.
    suffix = "-quick" if args.quick else ""
    out = RAW / f"produce-{datetime.date.today().isoformat()}{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": datetime.datetime.now().isoformat(timespec="seconds"),
                               "machine": machine(), "partitions": 1, "replication_factor": 3,
                               "min_insync_replicas": 2, "producer": {"linger.ms": 5},
                               "cluster": "harness LocalCluster, 1 ZooKeeper, 3 brokers",
                               "leaders": leaders,
                               "results": results}, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
