"""Network partition topologies as grudges (Jepsen's nemesis/partitioner idea).

A grudge maps a node to the set of nodes it drops traffic *from*. A symmetric
partition is a grudge where a drops b exactly when b drops a; a one-way drop
is a grudge that is not symmetric. Everything here is a pure function of the
node list (and of a random.Random for the shuffled shapes), so topologies can
be unit-tested and reproduced from a seed without touching a network.

Node names are strings; the pseudo-node CLIENTS stands for every client of the
cluster (producers and consumers), which lets "clients cut off from one broker"
be a grudge like any other.
"""
from __future__ import annotations

import random
from typing import Iterable, Sequence

Grudge = dict[str, frozenset[str]]

# Stands for every workload client; mechanisms translate it (an iptables rule
# on the broker, the client->broker proxies). Same name as the source of the
# proxied client links ("client_to_broker-1").
CLIENTS = "client"


def complete(components: Iterable[Iterable[str]]) -> Grudge:
    """Each node drops traffic from every node outside its own component."""
    comps = [frozenset(c) for c in components]
    everyone = frozenset().union(*comps) if comps else frozenset()
    out: Grudge = {}
    for comp in comps:
        for node in comp:
            out[node] = out.get(node, frozenset()) | (everyone - comp)
    return normalize(out)


def normalize(grudge: dict[str, Iterable[str]]) -> Grudge:
    """Drop empty entries and self-grudges, freeze the sets."""
    out: Grudge = {}
    for node, snubbed in grudge.items():
        s = frozenset(snubbed) - {node}
        if s:
            out[node] = s
    return out


def bisect(nodes: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split in two; the first half is the smaller one when the count is odd."""
    mid = len(nodes) // 2
    return list(nodes[:mid]), list(nodes[mid:])


def isolate(node: str, nodes: Sequence[str]) -> Grudge:
    """One node on its own, everyone else together."""
    if node not in nodes:
        raise ValueError(f"{node!r} is not one of {list(nodes)}")
    return complete([[node], [n for n in nodes if n != node]])


def random_halves(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """Shuffle, then cut into a minority and a majority."""
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    return complete(bisect(shuffled))


def majorities_ring(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """Every node sees a majority, and no two nodes see the same majority.

    Nodes are shuffled onto a ring; each window of m consecutive nodes
    (m = majority) is the view of the node in its middle, which drops everyone
    outside it. Each node is the middle of exactly one window. With an odd m
    the views are symmetric; with an even m a node sees one more node on one
    side than on the other, so some drops are one-way (as in Jepsen).
    """
    ring = list(nodes)
    rng.shuffle(ring)
    n = len(ring)
    if n < 3:
        raise ValueError("a majorities ring needs at least 3 nodes")
    m = majority(n)
    everyone = frozenset(ring)
    out: dict[str, frozenset[str]] = {}
    for i in range(n):
        window = [ring[(i + k) % n] for k in range(m)]
        out[window[m // 2]] = everyone - frozenset(window)
    return normalize(out)


def bridge(nodes: Sequence[str], rng: random.Random | None = None) -> Grudge:
    """Two halves that cannot see each other, joined by one node that sees
    both and that both see (the first node of the second half)."""
    ordered = list(nodes)
    if rng is not None:
        rng.shuffle(ordered)
    if len(ordered) < 3:
        raise ValueError("a bridge needs at least 3 nodes")
    left, right = bisect(ordered)
    hub = right[0]
    g = complete([left, right])
    return normalize({n: s - {hub} for n, s in g.items() if n != hub})


def one_way(victims: Iterable[str], sources: Iterable[str]) -> Grudge:
    """Victims drop traffic from sources; sources still hear the victims."""
    src = frozenset(sources)
    return normalize({v: src for v in victims})


def cut_off(node: str, others: Iterable[str]) -> Grudge:
    """`node` and `others` drop each other, nothing else changes (a broker cut
    off from ZooKeeper only; clients cut off from one broker)."""
    rest = frozenset(others) - {node}
    g: dict[str, frozenset[str]] = {node: rest}
    for o in rest:
        g[o] = frozenset({node})
    return normalize(g)


def majority(n: int) -> int:
    return n // 2 + 1


def merge(*grudges: Grudge) -> Grudge:
    out: dict[str, frozenset[str]] = {}
    for g in grudges:
        for node, s in g.items():
            out[node] = out.get(node, frozenset()) | s
    return normalize(out)


def is_symmetric(grudge: Grudge) -> bool:
    return all(a in grudge.get(b, ()) for a, snubbed in grudge.items() for b in snubbed)


def drops(grudge: Grudge) -> list[tuple[str, str]]:
    """(src, dst) pairs whose traffic dst drops, sorted: the wire-level view."""
    return sorted((src, dst) for dst, snubbed in grudge.items() for src in snubbed)


def visible(grudge: Grudge, node: str, nodes: Iterable[str]) -> frozenset[str]:
    """Nodes `node` still hears from (itself included)."""
    return frozenset(nodes) - grudge.get(node, frozenset())


def to_json(grudge: Grudge) -> dict[str, list[str]]:
    return {n: sorted(s) for n, s in sorted(grudge.items())}


def describe(grudge: Grudge) -> str:
    """Short text for histories and logs: "b1<-{b2,b3} b2<-{b1}"."""
    return " ".join(f"{n}<-{{{','.join(sorted(s))}}}" for n, s in sorted(grudge.items()))
