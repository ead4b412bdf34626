"""The links of a proxied cluster: one Toxiproxy-compatible proxy per directed
connection (client->broker, broker->broker, broker->ZooKeeper).

A link's proxy is named `<src>_to_<dst>`, e.g. `broker-1_to_broker-2`,
`broker-2_to_zk-1`, `client_to_broker-3`; fault injectors cut or degrade a
link by disabling its proxy or adding toxics to it through the ordinary
Toxiproxy HTTP API.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from contracts.deadline import wait_until
from harness.backends.base import ClusterError


@dataclass(frozen=True)
class Link:
    src: str        # "client" or a node name
    dst: str        # a node name
    listen: str     # host:port the proxy listens on
    upstream: str   # host:port of the destination, as the proxy resolves it
    connect: str = ""  # host:port the source dials, when it differs from `listen`

    @property
    def proxy_name(self) -> str:
        return f"{self.src}_to_{self.dst}"

    @property
    def address(self) -> str:
        return self.connect or self.listen

    @property
    def listen_port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


@dataclass
class LinkTable:
    api: str | None = None  # host:port of the proxy's HTTP API
    links: dict[str, Link] = field(default_factory=dict)

    def add(self, link: Link) -> None:
        self.links[link.proxy_name] = link

    def has(self, src: str, dst: str) -> bool:
        return f"{src}_to_{dst}" in self.links

    def get(self, src: str, dst: str) -> Link:
        try:
            return self.links[f"{src}_to_{dst}"]
        except KeyError:
            raise ClusterError(f"no proxied link {src} -> {dst}") from None

    def from_node(self, src: str) -> list[Link]:
        return [l for l in self.links.values() if l.src == src]

    def between(self, a: str, b: str) -> list[Link]:
        """Both directions of the a<->b connection (the proxy carries both byte streams
        of a connection opened by its source)."""
        return [l for l in self.links.values() if {l.src, l.dst} == {a, b}]

    def _url(self, path: str) -> str:
        if not self.api:
            raise ClusterError("this cluster was started without proxied links "
                               "(ClusterSpec.proxied / --proxied)")
        return f"http://{self.api}{path}"

    def wait_api(self, timeout: float, describe=lambda: "") -> None:
        import requests
        if wait_until(lambda: requests.get(self._url("/version"), timeout=2).ok, timeout, 0.1,
                      retry_on=(requests.RequestException,)):
            return
        raise ClusterError(f"the proxy did not answer on {self.api} within {timeout:.0f}s. {describe()}")

    def create_all(self) -> None:
        import requests
        for link in self.links.values():
            r = requests.post(self._url("/proxies"), timeout=10, json={
                "name": link.proxy_name, "listen": link.listen, "upstream": link.upstream,
                "enabled": True})
            if r.status_code not in (200, 201):
                raise ClusterError(f"cannot create proxy {link.proxy_name}: "
                                   f"{r.status_code} {r.text.strip()}")

    def proxy_client(self):
        """A toxiproxy-python client pointed at this cluster's proxy."""
        from toxiproxy import Toxiproxy
        host, port = self._url("").split("//")[1].rsplit(":", 1)
        t = Toxiproxy()
        t.update_api_consumer(host, int(port))
        return t

    def to_json(self) -> dict:
        return {"api": self.api, "links": [asdict(l) for l in self.links.values()]}

    @classmethod
    def from_json(cls, d: dict) -> "LinkTable":
        t = cls(d.get("api"))
        for l in d.get("links", []):
            t.add(Link(**l))
        return t


class ProxiedLinkTable:
    """contracts.abilities.ProxiedLinks for a cluster whose links are the
    LinkTable `self.links` (the docker, local and external backends)."""
    links: LinkTable

    def proxied_links(self) -> list[Link]:
        return list(self.links.links.values())

    def proxy_client(self):
        return self.links.proxy_client()
