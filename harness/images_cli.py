"""`chaoslog images`: build the container images (skipped in seconds when up to date)."""
from __future__ import annotations

import json


def add_parser(sub) -> None:
    p = sub.add_parser("images", help="build the container images (cached by a hash of their inputs)")
    p.add_argument("--force", action="store_true", help="rebuild even if up to date")
    p.add_argument("--prune", action="store_true", help="also remove chaoslog images of older inputs")
    p.set_defaults(func=run)


def run(args) -> int:
    from harness import images
    tags = images.ensure_images(force=args.force)
    out = {"base": tags.base, "zookeeper": tags.zookeeper, "broker": tags.broker}
    if args.prune:
        out["removed"] = images.prune(tags)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    import argparse
    import sys
    parser = argparse.ArgumentParser(prog="python -m harness.images_cli")
    add_parser(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args(["images", *sys.argv[1:]])
    sys.exit(ns.func(ns))
