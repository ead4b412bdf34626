"""Partition topologies: the properties Jepsen's partitioners promise."""
import itertools
import random

import pytest
from hypothesis import given, strategies as st

from faults import grudge as g

NODES5 = ["n1", "n2", "n3", "n4", "n5"]
node_lists = st.integers(min_value=3, max_value=9).map(lambda n: [f"n{i}" for i in range(1, n + 1)])


def test_complete_grudge_of_two_components():
    out = g.complete([["a", "b"], ["c"]])
    assert out == {"a": {"c"}, "b": {"c"}, "c": {"a", "b"}}
    assert g.is_symmetric(out)


def test_isolate_cuts_one_node_both_ways():
    out = g.isolate("n3", NODES5)
    assert out["n3"] == frozenset(NODES5) - {"n3"}
    for n in NODES5:
        if n != "n3":
            assert out[n] == {"n3"}
    with pytest.raises(ValueError):
        g.isolate("nope", NODES5)


@given(node_lists, st.integers())
def test_random_halves_is_a_minority_and_a_majority(nodes, seed):
    out = g.random_halves(nodes, random.Random(seed))
    assert g.is_symmetric(out)
    views = {g.visible(out, n, nodes) for n in nodes}
    assert len(views) == 2
    sizes = sorted(len(v) for v in views)
    assert sizes == [len(nodes) // 2, len(nodes) - len(nodes) // 2]
    # The two sides are disjoint and cover every node.
    a, b = views
    assert not (a & b) and (a | b) == set(nodes)


def test_random_halves_depends_only_on_the_seed():
    assert g.random_halves(NODES5, random.Random(7)) == g.random_halves(NODES5, random.Random(7))
    shapes = {tuple(g.drops(g.random_halves(NODES5, random.Random(s)))) for s in range(20)}
    assert len(shapes) > 1


@given(node_lists, st.integers())
def test_majorities_ring_everyone_sees_a_distinct_majority(nodes, seed):
    out = g.majorities_ring(nodes, random.Random(seed))
    m = g.majority(len(nodes))
    views = [g.visible(out, n, nodes) for n in nodes]
    for n, v in zip(nodes, views):
        assert n in v
        assert len(v) == m
    assert len(set(views)) == len(nodes)
    if m % 2 == 1:
        assert g.is_symmetric(out)


def test_majorities_ring_needs_three_nodes():
    with pytest.raises(ValueError):
        g.majorities_ring(["a", "b"], random.Random(0))


@given(node_lists, st.integers())
def test_bridge_joins_two_halves_through_one_node(nodes, seed):
    out = g.bridge(nodes, random.Random(seed))
    hubs = [n for n in nodes if g.visible(out, n, nodes) == set(nodes)
            and all(n not in out.get(o, ()) for o in nodes)]
    assert len(hubs) == 1
    hub = hubs[0]
    others = [n for n in nodes if n != hub]
    # Without the hub, the rest falls into exactly two sides that drop each other.
    sides = {g.visible(out, n, nodes) - {hub} for n in others}
    assert len(sides) == 2
    assert g.is_symmetric(out)


def test_bridge_without_shuffle_is_fixed():
    out = g.bridge(NODES5)
    # halves [n1 n2] [n3 n4 n5], n3 bridges
    assert out == {"n1": {"n4", "n5"}, "n2": {"n4", "n5"}, "n4": {"n1", "n2"}, "n5": {"n1", "n2"}}


def test_one_way_is_asymmetric():
    out = g.one_way(["b1"], ["b2", "b3"])
    assert out == {"b1": {"b2", "b3"}}
    assert not g.is_symmetric(out)
    assert g.drops(out) == [("b2", "b1"), ("b3", "b1")]


def test_cut_off_from_zookeeper_only():
    out = g.cut_off("broker-1", ["zk-1", "zk-2", "zk-3"])
    assert out["broker-1"] == {"zk-1", "zk-2", "zk-3"}
    assert out["zk-2"] == {"broker-1"}
    assert "broker-2" not in out
    assert g.is_symmetric(out)


def test_clients_cut_off_from_one_broker():
    out = g.cut_off("broker-2", [g.CLIENTS])
    assert out == {"broker-2": {g.CLIENTS}, g.CLIENTS: {"broker-2"}}


def test_normalize_drops_self_and_empty():
    assert g.normalize({"a": ["a"], "b": [], "c": ["a", "c"]}) == {"c": {"a"}}


def test_merge_and_render():
    out = g.merge(g.one_way(["a"], ["b"]), g.one_way(["b"], ["a"]), g.one_way(["a"], ["c"]))
    assert out == {"a": {"b", "c"}, "b": {"a"}}
    assert g.describe(out) == "a<-{b,c} b<-{a}"
    assert g.to_json(out) == {"a": ["b", "c"], "b": ["a"]}


def test_every_pair_of_isolations_differs():
    shapes = [g.drops(g.isolate(n, NODES5)) for n in NODES5]
    for a, b in itertools.combinations(shapes, 2):
        assert a != b
