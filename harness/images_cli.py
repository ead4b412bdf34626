"""`chaoslog images`: build the container images (skipped in seconds when up to date).

`--target tansu` builds the opt-in image of the tansu broker instead, which
compiles tansu from crates.io (many minutes the first time). Exit codes
(reports/exit_codes.py): 0 built, 4 the build failed."""
from __future__ import annotations

import json

from reports.exit_codes import EXIT_ERROR, EXIT_OK


def add_parser(sub) -> None:
    p = sub.add_parser("images", help="build the container images (cached by a hash of their inputs)")
    p.add_argument("--force", action="store_true", help="rebuild even if up to date")
    p.add_argument("--prune", action="store_true", help="also remove chaoslog images of older inputs")
    p.add_argument("--target", choices=("chaoslog", "tansu"), default="chaoslog",
                   help="chaoslog: the built-in broker's images (default); tansu: the tansu "
                        "broker and its PostgreSQL (compiles tansu, many minutes the first time)")
    p.set_defaults(func=run)


def run(args) -> int:
    from harness import images
    if getattr(args, "target", "chaoslog") == "tansu":
        return _tansu(args)
    tags = images.ensure_images(force=args.force)
    out = {"base": tags.base, "zookeeper": tags.zookeeper, "broker": tags.broker}
    if args.prune:
        out["removed"] = images.prune(tags)
    print(json.dumps(out, indent=2))
    return EXIT_OK


def _tansu(args) -> int:
    """The tansu image: its tag on stdout; a failed build is one message on
    stderr (the compiler's or docker's last lines), EXIT_ERROR."""
    import sys
    from harness import images
    try:
        tags = images.ensure_tansu_image(force=args.force)
    except images.ImageError as e:
        print(f"chaoslog images --target tansu: {e}", file=sys.stderr)
        return EXIT_ERROR
    out = {"tansu": tags.tansu, "postgres": tags.postgres, "crate": images.tansu_crate().spec}
    if args.prune:
        out["removed"] = images.prune()
    print(json.dumps(out, indent=2))
    return EXIT_OK


if __name__ == "__main__":
    import argparse
    import sys
    parser = argparse.ArgumentParser(prog="python -m harness.images_cli")
    add_parser(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args(["images", *sys.argv[1:]])
    sys.exit(ns.func(ns))
