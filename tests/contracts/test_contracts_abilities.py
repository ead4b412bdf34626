"""contracts.abilities: a need is met by the ability it names, or by any one
of a tuple of them; a cluster meets what it declares, nothing it merely has."""
from __future__ import annotations

from types import SimpleNamespace

from contracts.abilities import (ABILITIES, NETWORK, NodeFiles, NodeNetwork, PauseResume,
                                 ProcessControl, ProxiedLinks, can, met, missing)


def test_a_need_is_one_ability_or_any_of_several():
    assert met(ProcessControl, {ProcessControl})
    assert not met(ProcessControl, {PauseResume})
    assert met(NETWORK, {ProxiedLinks}) and met(NETWORK, {NodeNetwork})
    assert not met(NETWORK, {NodeFiles})


def test_missing_lists_the_unmet_needs_in_order():
    needs = (ProcessControl, NETWORK, NodeFiles)
    assert missing(needs, {NodeNetwork}) == [ProcessControl, NodeFiles]
    assert missing(needs, set(ABILITIES)) == []


def test_a_cluster_can_what_it_declares_not_what_it_happens_to_have():
    # exec and node_ip are there, but NodeNetwork is not declared: no iptables
    cluster = SimpleNamespace(abilities=frozenset({ProcessControl}),
                              exec=lambda name, argv: (0, ""), node_ip=lambda name: "10.0.0.2")
    assert can(cluster, ProcessControl)
    assert not can(cluster, NodeNetwork) and not can(cluster, NETWORK)
