"""`chaoslog`, the one console script. Each subcommand lives beside the code it
drives and registers itself here through an `add_parser(subparsers)` function.
Every command exits with the codes of reports/exit_codes.py."""
from __future__ import annotations

import argparse
import sys

from harness.backends.base import ClusterError
from reports.exit_codes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED


def _subcommand_modules():
    # Imported lazily: `chaoslog proxy` must not pay for pyspark, and so on.
    import cluster.admin
    import faults.proxy.cli
    import harness.campaign_cli
    import harness.cluster_cli
    import harness.demo
    import harness.fault_cli
    import harness.fuzz_cli
    import harness.images_cli
    import harness.run_cli
    import harness.shrink_cli
    import harness.warehouse_cli
    import reports.cli
    return (harness.demo, harness.cluster_cli, harness.run_cli, harness.shrink_cli,
            harness.campaign_cli, harness.fault_cli, cluster.admin, reports.cli,
            harness.warehouse_cli, faults.proxy.cli, harness.images_cli, harness.fuzz_cli)


class OneLineErrors(argparse.ArgumentParser):
    """Usage errors as one line that names the command, instead of a usage dump."""

    def error(self, message: str):
        self.exit(EXIT_REFUSED, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="chaoslog",
        description="Chaos testing for a replicated log built on the Kafka 0.8 replication design.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in _subcommand_modules():
        module.add_parser(sub)
    return parser


# The commands that start clusters: before they do, whatever a killed earlier
# chaoslog process left (containers, networks, local processes, proxies; its
# iptables rules live and die in its containers) is removed.
STARTS_CLUSTERS = {"run", "demo", "shrink", "campaign", "fuzz"}


def _reap(args: argparse.Namespace) -> None:
    if args.command not in STARTS_CLUSTERS and not (
            args.command == "cluster" and getattr(args, "action", None) == "up"):
        return
    from harness.reaper import reap_orphans
    removed = reap_orphans()
    if removed:
        print(f"chaoslog: removed what a killed earlier run left: {', '.join(removed)}",
              file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _reap(args)
    try:
        return int(args.func(args) or EXIT_OK)
    except ClusterError as e:   # says what is wrong and what to do
        print(f"chaoslog: error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        print("chaoslog: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:  # noqa: BLE001 - a bug of chaoslog: its traceback, and not 1 (invalid)
        import traceback
        traceback.print_exc()
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
