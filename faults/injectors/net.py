"""Two ways to make a grudge real: iptables inside containers, or the proxy.

iptables (clusters with NodeNetwork, contracts/abilities.py: the docker
backend): every node gets chains of its own, CHAOSLOG hooked
first into INPUT and CHAOSLOG-OUT into OUTPUT; a grudge "b drops a" becomes
`-s IP(a) -j DROP` in b's CHAOSLOG (or `-d IP(b) -j DROP` in a's CHAOSLOG-OUT
when b's container may not run iptables). Healing flushes the chains, which
touches no rule we did not write. Dropped packets time out (like a cut
cable), they are not refused.

proxy (clusters with ProxiedLinks: proxied ones of any backend): the cluster
routes each connection that one node opens to another through its own
proxy, `proxied_links()` lists them as (src, dst, proxy_name). For a link src->dst: both sides drop each other ->
disable the proxy (connections close, new ones are refused); only dst drops
src -> a `timeout 0` toxic on the upstream stream (bytes from src to dst are
held until healed); only src drops dst -> the same on downstream. Links that no
connection uses need nothing. Healing re-enables every link and removes every
toxic whose name starts with TOXIC_PREFIX.
"""
from __future__ import annotations

import abc
from typing import Any, Callable, Iterable

from contracts.abilities import Cluster, Link, NodeNetwork, ProxiedLinks, can
from faults import grudge as G
from faults.injectors.base import FaultError

CHAIN = "CHAOSLOG"          # hooked into INPUT
OUT_CHAIN = "CHAOSLOG-OUT"  # hooked into OUTPUT
TOXIC_PREFIX = "chaoslog-"


def has_exec(cluster: Cluster) -> bool:
    """Nodes with a network namespace of their own that we can run iptables in."""
    return can(cluster, NodeNetwork)


def cluster_links(cluster: Cluster) -> list[Link]:
    """The cluster's proxied links; none when it routes nothing through the proxy."""
    return list(cluster.proxied_links()) if can(cluster, ProxiedLinks) else []


def proxy_client(cluster: Cluster) -> Any:
    """A toxiproxy-python client for the cluster's proxy."""
    return cluster.proxy_client()


def has_proxy(cluster: Cluster) -> bool:
    return bool(cluster_links(cluster))


class Net(abc.ABC):
    name = "?"

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    @abc.abstractmethod
    def apply(self, grudge: G.Grudge) -> str:
        """Make the grudge real; returns a short description of what was done."""

    @abc.abstractmethod
    def heal(self) -> list[str]: ...

    def dropped(self) -> int | None:
        """Packets the cut dropped so far, or None when the mechanism cannot count them."""
        return None


def choose(cluster: Cluster, mechanism: str = "auto") -> Net:
    if mechanism == "iptables" or (mechanism == "auto" and has_exec(cluster)):
        if not has_exec(cluster):
            raise FaultError("iptables partitions need the docker backend (cluster.exec)")
        return IptablesNet(cluster)
    if mechanism in ("proxy", "auto"):
        if not has_proxy(cluster):
            raise FaultError("network faults need a proxied cluster (links through the proxy) "
                             "or the docker backend (iptables)")
        return ProxyNet(cluster)
    raise FaultError(f"unknown partition mechanism {mechanism!r}: iptables, proxy or auto")


# -- iptables -----------------------------------------------------------------

def _run(cluster: Cluster, node: str, script: str) -> tuple[int, str]:
    code, out = cluster.exec(node, ["sh", "-c", script])
    if isinstance(out, bytes):
        out = out.decode(errors="replace")
    return code, str(out)


def chain_setup() -> list[str]:
    """Create our two chains and hook them first into INPUT and OUTPUT (idempotent)."""
    lines = []
    for chain, hook in ((CHAIN, "INPUT"), (OUT_CHAIN, "OUTPUT")):
        lines.append(f"(iptables -N {chain} 2>/dev/null || true)")
        lines.append(f"(iptables -C {hook} -j {chain} 2>/dev/null || iptables -I {hook} 1 -j {chain})")
    return lines


def plan_iptables(grudge: G.Grudge, ips: dict[str, str], capable: Callable[[str], bool]
                  ) -> dict[str, list[str]]:
    """node -> iptables commands that make `grudge` real. Pure, given `capable`.

    "dst drops src" is an INPUT drop on dst; if dst cannot run iptables (a
    container without NET_ADMIN) it becomes an OUTPUT drop on src, which stops
    the same packets. CLIENTS are whatever is not loopback or a cluster node:
    a node that drops clients accepts the nodes and drops the rest; clients
    that drop a node are the same rule at that node (TCP needs both ways)."""
    rules: dict[str, list[str]] = {}
    clients_blocked: set[str] = set()
    for dst, sources in sorted(grudge.items()):
        if dst == G.CLIENTS:
            clients_blocked |= set(sources)
            continue
        for src in sorted(sources):
            if src == G.CLIENTS:
                clients_blocked.add(dst)
            elif capable(dst):
                rules.setdefault(dst, []).append(f"iptables -A {CHAIN} -s {ips[src]} -j DROP")
            elif capable(src):
                rules.setdefault(src, []).append(f"iptables -A {OUT_CHAIN} -d {ips[dst]} -j DROP")
            else:
                raise FaultError(f"neither {dst} nor {src} can run iptables (the container needs "
                                 f"NET_ADMIN): cannot make {dst} drop traffic from {src}")
    for node in sorted(clients_blocked):
        if not capable(node):
            raise FaultError(f"{node} cannot run iptables (no NET_ADMIN): cannot cut its clients off")
        r = rules.setdefault(node, [])
        r.append(f"iptables -A {CHAIN} -i lo -j RETURN")
        r += [f"iptables -A {CHAIN} -s {ip} -j RETURN" for _, ip in sorted(ips.items())]
        r.append(f"iptables -A {CHAIN} -j DROP")
    return rules


class IptablesNet(Net):
    name = "iptables"

    def __init__(self, cluster: Cluster):
        super().__init__(cluster)
        self._capable: dict[str, bool] = {}

    def capable(self, node: str) -> bool:
        """Whether iptables works in `node` (probed once: the chains are set up)."""
        if node not in self._capable:
            code, _ = _run(self.cluster, node, " && ".join(chain_setup()))
            self._capable[node] = code == 0
        return self._capable[node]

    def apply(self, grudge: G.Grudge) -> str:
        names = [n.name for n in self.cluster.nodes()]
        ips = {n: self.cluster.node_ip(n) for n in names}
        for n in set(grudge).union(*grudge.values()) - {G.CLIENTS}:
            if n not in ips:
                raise FaultError(f"no node {n!r} in this cluster")
        plan = plan_iptables(grudge, ips, self.capable)
        for node, cmds in sorted(plan.items()):
            code, out = _run(self.cluster, node, " && ".join(chain_setup() + cmds))
            if code != 0:
                raise FaultError(f"iptables on {node} failed ({code}): {out.strip()[:300]}")
        return "iptables " + "; ".join(f"{n}: {len(c)} rules" for n, c in sorted(plan.items()))

    def heal(self) -> list[str]:
        return heal_iptables(self.cluster)

    def dropped(self) -> int | None:
        """Packets our DROP rules dropped so far, over every running node
        (read before healing: the flush resets the counters); None when no
        node could be asked or no DROP rule is left to ask (another fault's
        heal flushed them: every network heal undoes them all)."""
        total, rules = 0, 0
        for n in self.cluster.nodes():
            if n.state != "running":
                continue
            code, out = _run(self.cluster, n.name, f"iptables -L {CHAIN} -v -x -n 2>/dev/null; "
                                                     f"iptables -L {OUT_CHAIN} -v -x -n 2>/dev/null")
            if code != 0:
                continue
            drops = [int(f[0]) for f in (line.split() for line in out.splitlines())
                     if len(f) > 2 and f[0].isdigit() and f[2] == "DROP"]
            rules += len(drops)
            total += sum(drops)
        return total if rules else None


def heal_iptables(cluster: Cluster) -> list[str]:
    if not has_exec(cluster):
        return []
    done = []
    for n in cluster.nodes():
        if n.state != "running":
            continue
        # Fails where the chains never existed (or iptables is not allowed): fine.
        code, _ = _run(cluster, n.name, f"iptables -F {CHAIN} 2>/dev/null && iptables -F {OUT_CHAIN} 2>/dev/null")
        if code == 0:
            done.append(f"flushed iptables chains on {n.name}")
    return done


# -- proxy --------------------------------------------------------------------

def plan_links(grudge: G.Grudge, links: Iterable[Link]) -> list[tuple[str, str]]:
    """(proxy_name, action) for each link the grudge affects; action is
    'disable', 'upstream' or 'downstream' (the stream to hold). Pure."""
    out = []
    for link in links:
        src, dst = link.src, link.dst
        dst_drops = src in grudge.get(dst, ())
        src_drops = dst in grudge.get(src, ())
        if dst_drops and src_drops:
            out.append((link.proxy_name, "disable"))
        elif dst_drops:
            out.append((link.proxy_name, "upstream"))
        elif src_drops:
            out.append((link.proxy_name, "downstream"))
    return out


def _proxies(cluster: Cluster) -> dict[str, Any]:
    return proxy_client(cluster).proxies()


class ProxyNet(Net):
    name = "proxy"

    def apply(self, grudge: G.Grudge) -> str:
        links = cluster_links(self.cluster)
        mentioned = set(grudge).union(*grudge.values())
        if G.CLIENTS in mentioned and not any(l.src == G.CLIENTS for l in links):
            raise FaultError("this cluster does not route clients through the proxy; "
                             "cutting clients off needs the docker backend (iptables)")
        plan = plan_links(grudge, links)
        proxies = _proxies(self.cluster)
        for proxy_name, action in plan:
            p = proxies.get(proxy_name)
            if p is None:
                raise FaultError(f"proxy {proxy_name!r} is not there")
            if action == "disable":
                p.disable()
            else:
                p.add_toxic(name=f"{TOXIC_PREFIX}partition-{action}", type="timeout",
                            stream=action, toxicity=1.0, attributes={"timeout": 0})
        return "proxy " + " ".join(f"{n}:{a}" for n, a in plan)

    def heal(self) -> list[str]:
        return heal_proxies(self.cluster)


def heal_proxies(cluster: Cluster) -> list[str]:
    if not has_proxy(cluster):
        return []
    done = []
    names = {l.proxy_name for l in cluster_links(cluster)}
    for name, p in sorted(_proxies(cluster).items()):
        if name not in names:
            continue
        if not p.enabled:
            p.enable()
            done.append(f"enabled proxy {name}")
        for toxic in list(p.toxics()):
            if toxic.startswith(TOXIC_PREFIX):
                p.destroy_toxic(toxic)
                done.append(f"removed {toxic} from {name}")
    return done
