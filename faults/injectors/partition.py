"""Network partitions: compute a grudge (faults.grudge), hand it to a
mechanism (faults.injectors.net), heal by undoing the mechanism.

Shapes:
  isolate    the target alone, everyone else together
  halves     random minority / majority of all nodes
  ring       majorities ring (every node sees a different majority)
  bridge     two halves joined by one node
  one-way    the target stops hearing the other brokers (it can still send);
             direction=out reverses it: the others stop hearing the target
  zk         the target broker and ZooKeeper drop each other, brokers unaffected
  clients    the target broker and the clients drop each other
`among`: "all" (brokers and ZooKeeper, the default) or "brokers" for the
shapes that partition a set of nodes.
"""
from __future__ import annotations

from typing import Any

from contracts.abilities import NETWORK
from faults import grudge as G
from faults.injectors import net
from faults.injectors.base import FaultContext, FaultError, Injector

SHAPES = ("isolate", "halves", "ring", "bridge", "one-way", "zk", "clients")
TARGETED = ("isolate", "one-way", "zk", "clients")


class Partition(Injector):
    NEEDS = (NETWORK,)

    def __init__(self, ctx: FaultContext, target: str | None = None, *, shape: str,
                 among: str = "all", direction: str = "in", **params: Any):
        if shape not in SHAPES:
            raise FaultError(f"unknown partition shape {shape!r}; shapes are {', '.join(SHAPES)}")
        if among not in ("all", "brokers"):
            raise FaultError("among is 'all' or 'brokers'")
        if direction not in ("in", "out"):
            raise FaultError("direction is 'in' or 'out'")
        if shape in TARGETED and target is None:
            target = "random"
        super().__init__(ctx, target, **params)
        self.shape = shape
        self.fault = f"partition-{shape}"
        self.among = among
        self.direction = direction
        self.grudge: G.Grudge = {}
        self.mechanism: net.Net | None = None
        self.applied = ""

    def _nodes(self) -> list[str]:
        names = self.ctx.cluster.spec.node_names()
        return [n for n in names if self.among == "all" or n.startswith("broker-")]

    def _resolve(self) -> list[str]:
        rng = self.ctx.rng
        nodes = self._nodes()
        brokers = [n for n in nodes if n.startswith("broker-")]
        zks = [n for n in self.ctx.cluster.spec.node_names() if n.startswith("zk-")]
        if self.shape in TARGETED:
            victims = self.ctx.resolver.resolve(self.target)
            if len(victims) != 1:
                raise FaultError(f"{self.fault} takes one node, {self.target} gave {victims}")
            v = victims[0]
        if self.shape == "isolate":
            self.grudge = G.isolate(v, nodes)
        elif self.shape == "halves":
            self.grudge = G.random_halves(nodes, rng)
        elif self.shape == "ring":
            self.grudge = G.majorities_ring(nodes, rng)
        elif self.shape == "bridge":
            self.grudge = G.bridge(nodes, rng)
        elif self.shape == "one-way":
            others = [b for b in brokers if b != v]
            self.grudge = (G.one_way([v], others) if self.direction == "in"
                           else G.one_way(others, [v]))
        elif self.shape == "zk":
            if not v.startswith("broker-"):
                raise FaultError("partition-zk cuts a broker off ZooKeeper: target a broker")
            self.grudge = G.cut_off(v, zks)
        elif self.shape == "clients":
            self.grudge = G.cut_off(v, [G.CLIENTS])
        if not self.grudge:
            raise FaultError(f"{self.fault}: nothing to partition among {nodes}")
        return sorted((set(self.grudge) | set().union(*self.grudge.values())) - {G.CLIENTS})

    def _start(self) -> None:
        self.mechanism = net.choose(self.ctx.cluster, self.ctx.mechanism)
        self.applied = self.mechanism.apply(self.grudge)

    def _stop(self) -> None:
        if self.mechanism is not None:
            # Evidence that the cut took effect (a planned fault that changed
            # nothing must not count as one that did).
            dropped = self.mechanism.dropped()
            if dropped is not None:
                self.notes.append(f"dropped {dropped} packets")
            self.mechanism.heal()

    def detail(self) -> str:
        parts = [f"grudge {G.describe(self.grudge)}"]
        if self.mechanism is not None:
            parts.append(f"via {self.mechanism.name}")
        return "; ".join(parts + self.notes)
