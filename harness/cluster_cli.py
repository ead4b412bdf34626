"""`chaoslog cluster ...`: a cluster you drive by hand, like Blockade.

`up` starts a cluster that outlives the command and records it under
~/.chaoslog/clusters/NAME.json; the other commands find it there. A
ClusterError (no such cluster or node, a bad config) is refused in one line
by harness/cli.py (exit 2, reports/exit_codes.py).
"""
from __future__ import annotations

import argparse
import json
import sys

from cluster.config import BrokerConfig, ConfigError
from cluster.protocol.sasl import SECURITY_PROTOCOLS
from harness.backends import BACKENDS, attach, make_cluster, registered
from harness.backends.base import ClusterError, ClusterSpec
from reports.exit_codes import EXIT_OK

NODE_ACTIONS = ("kill", "stop", "start", "pause", "resume")


def parse_broker_config(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ClusterError(f"--broker-config {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def add_parser(sub) -> None:
    p = sub.add_parser("cluster", help="bring a cluster up, inspect it, break nodes by hand, tear it down")
    csub = p.add_subparsers(dest="action", metavar="ACTION")
    csub.required = True

    up = csub.add_parser("up", help="start a cluster and print its addresses as JSON")
    up.add_argument("--backend", choices=BACKENDS, help="default: docker when an engine answers, else local")
    up.add_argument("--brokers", type=positive_int, default=3)
    up.add_argument("--zookeepers", type=int, choices=(1, 3), default=1)
    up.add_argument("--name", default="chaoslog")
    up.add_argument("--proxied", action="store_true",
                    help="route every link through the proxy (local backend)")
    up.add_argument("--broker-config", nargs="*", metavar="KEY=VALUE")
    up.add_argument("--security", choices=SECURITY_PROTOCOLS, default="PLAINTEXT",
                    help="the brokers' listener; with TLS or SASL the cluster makes its CA and "
                         "users, and `client` in the output says how to connect (docs/targets.md)")
    up.set_defaults(func=cmd_up)

    for action in ("status", "down"):
        a = csub.add_parser(action, help={"status": "print the cluster's addresses and node states",
                                          "down": "remove every node, network and file"}[action])
        a.add_argument("--name", default="chaoslog")
        a.set_defaults(func=cmd_status if action == "status" else cmd_down)

    for action in NODE_ACTIONS:
        a = csub.add_parser(action, help=f"{action} one node (broker-N or zk-N)")
        a.add_argument("node")
        a.add_argument("--name", default="chaoslog")
        a.set_defaults(func=cmd_node)


def cmd_up(args) -> int:
    if registered(args.name):
        raise ClusterError(f"a cluster named {args.name!r} is already up; "
                           f"`chaoslog cluster down --name {args.name}` first, or pick another --name")
    broker_config = parse_broker_config(args.broker_config)
    try:  # refuse a bad config before anything starts
        BrokerConfig.from_dict(broker_config)
    except ConfigError as e:
        raise ClusterError(f"broker config: {e}") from None
    spec = ClusterSpec(name=args.name, brokers=args.brokers, zookeepers=args.zookeepers,
                       broker_config=broker_config, proxied=args.proxied, security=args.security)
    cluster = make_cluster(spec, args.backend, persistent=True)
    print(f"starting {args.brokers} brokers and {args.zookeepers} ZooKeeper "
          f"on the {cluster.backend} backend...", file=sys.stderr)
    cluster.start()
    out = cluster.describe()
    out["startup_seconds"] = round(getattr(cluster, "startup_seconds", 0.0), 1)
    print(json.dumps(out, indent=2))
    return EXIT_OK


def cmd_status(args) -> int:
    print(json.dumps(attach(args.name).describe(), indent=2))
    return EXIT_OK


def cmd_down(args) -> int:
    attach(args.name).destroy()
    print(f"cluster {args.name!r} removed", file=sys.stderr)
    return EXIT_OK


def cmd_node(args) -> int:
    cluster = attach(args.name)
    cluster.node(args.node)  # unknown node: a ClusterError naming the real ones
    getattr(cluster, f"{args.action}_node")(args.node)
    if args.action == "start" and args.node.startswith("broker-"):
        cluster.wait_brokers_registered([args.node])
    print(json.dumps(cluster.node(args.node).to_json()))
    return EXIT_OK
