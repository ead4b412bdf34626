"""Degraded links through the proxy's toxics: slow, narrow, chopped or
broken connections between nodes (there is no netem on this kernel, so all
of this lives in user space, in the proxy).

The toxic goes on every proxied link that touches the target nodes (both
directions of each by default), or on every link when no target is given.
Each toxic is named TOXIC_PREFIX + type + stream so that heal, here or from
another process, removes exactly ours.
"""
from __future__ import annotations

from typing import Any

from contracts.abilities import Link, ProxiedLinks
from faults.injectors import net
from faults.injectors.base import FaultContext, FaultError, Injector

# fault name -> (toxic type, default attributes). Units are Toxiproxy's.
TOXICS: dict[str, tuple[str, dict[str, int]]] = {
    "latency": ("latency", {"latency": 200, "jitter": 100}),       # ms
    "bandwidth": ("bandwidth", {"rate": 64}),                      # KB/s
    "slicer": ("slicer", {"average_size": 64, "size_variation": 32, "delay": 2000}),  # bytes, µs
    "reset-peer": ("reset_peer", {"timeout": 500}),                # ms before RST
    "link-timeout": ("timeout", {"timeout": 2000}),                # ms, then close
}


class LinkToxic(Injector):
    NEEDS = (ProxiedLinks,)

    def __init__(self, ctx: FaultContext, target: str | None = None, *, fault: str,
                 stream: str = "both", toxicity: float = 1.0, **attributes: Any):
        if fault not in TOXICS:
            raise FaultError(f"unknown link fault {fault!r}; link faults are {', '.join(TOXICS)}")
        if stream not in ("both", "upstream", "downstream"):
            raise FaultError("stream is both, upstream or downstream")
        kind, defaults = TOXICS[fault]
        unknown = set(attributes) - set(defaults)
        if unknown:
            raise FaultError(f"{fault} takes {', '.join(defaults)}, not {', '.join(sorted(unknown))}")
        attrs = {**defaults, **{k: int(v) for k, v in attributes.items()}}
        super().__init__(ctx, target, stream=stream, toxicity=toxicity, **attrs)
        self.fault = fault
        self.kind = kind
        self.attributes = attrs
        self.streams = ("upstream", "downstream") if stream == "both" else (stream,)
        self.toxicity = float(toxicity)
        self.links: list[Link] = []

    def _resolve(self) -> list[str]:
        nodes = self.ctx.resolver.resolve(self.target) if self.target else None
        links = net.cluster_links(self.ctx.cluster)
        self.links = [l for l in links if nodes is None or l.src in nodes or l.dst in nodes]
        if not self.links:
            raise FaultError(f"{self.fault}: no proxied link touches {nodes}")
        return nodes if nodes is not None else sorted({l.src for l in links} | {l.dst for l in links})

    def _toxic_name(self, stream: str) -> str:
        return f"{net.TOXIC_PREFIX}{self.kind}-{stream}"

    def _start(self) -> None:
        proxies = net.proxy_client(self.ctx.cluster).proxies()
        for link in self.links:
            p = proxies[link.proxy_name]
            for stream in self.streams:
                p.add_toxic(name=self._toxic_name(stream), type=self.kind, stream=stream,
                            toxicity=self.toxicity, attributes=dict(self.attributes))

    def _stop(self) -> None:
        proxies = net.proxy_client(self.ctx.cluster).proxies()
        for link in self.links:
            p = proxies.get(link.proxy_name)
            if p is None:
                continue
            present = p.toxics()
            for stream in self.streams:
                if self._toxic_name(stream) in present:
                    p.destroy_toxic(self._toxic_name(stream))

    def detail(self) -> str:
        parts = [f"{self.kind} {self.attributes} on {'+'.join(self.streams)}"]
        if self.links:
            parts.append("links " + ",".join(f"{l.src}->{l.dst}" for l in self.links))
        return "; ".join(parts + self.notes)
