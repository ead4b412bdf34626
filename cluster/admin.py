"""Admin functions and the `chaoslog admin` command: topics, replica
assignment and reassignment are created by an admin (docs/design.md#topics).

The admin never talks to brokers: it writes ZooKeeper znodes and reads the
state back. Which znodes is the coordination mode's (cluster/coordination.py):
those the controller watches (/brokers/topics/T, /admin/delete_topics/T,
/admin/partitions_add/T/P, /admin/reassign_partitions,
/admin/preferred_replica_election), or in V2 the brokers' state-change
queues. Functions that write take the mode (`mode`, the controller's unless
given); the checks before a write are the same in both.

Library functions take a started KazooClient and raise AdminError with a
one-line message; `run(args)` turns that into exit status 1 (2 for usage).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from cluster import modes, zkpaths
from cluster.config import COORDINATION_MODES
from cluster.controller.assignment import AssignmentError, assign_replicas
from cluster.controller.state_change_log import read_state_log
from cluster.coordination import AdminError, Coordination
from cluster.server.sasl import make_credential
from cluster.zkpaths import BrokerRegistration, TopicAssignment
from contracts.deadline import wait_until

TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class UsageError(AdminError):
    """Bad arguments (exit status 2)."""


# ---------------------------------------------------------------- reading
def brokers(zk: KazooClient) -> list[dict[str, Any]]:
    """Live brokers, by id."""
    try:
        ids = sorted(int(b) for b in zk.get_children(zkpaths.BROKER_IDS) if b.isdigit())
    except NoNodeError:
        return []
    pend = [(b, zk.get_async(zkpaths.broker_path(b))) for b in ids]
    out = []
    for b, a in pend:
        try:
            reg = BrokerRegistration.decode(b, a.get()[0])
        except NoNodeError:
            continue
        out.append({"id": b, "host": reg.host, "port": reg.port, "start_epoch": reg.start_epoch})
    return out


def controller_info(zk: KazooClient) -> dict[str, int]:
    """{"id": active controller broker id or -1, "epoch": controller epoch or 0}."""
    try:
        cid = int((zkpaths.loads(zk.get(zkpaths.CONTROLLER)[0]) or {}).get("brokerid", -1))
    except NoNodeError:
        cid = -1
    try:
        epoch = int(zk.get(zkpaths.CONTROLLER_EPOCH)[0].decode() or 0)
    except NoNodeError:
        epoch = 0
    return {"id": cid, "epoch": epoch}


def list_topics(zk: KazooClient) -> list[str]:
    try:
        return sorted(zk.get_children(zkpaths.TOPICS))
    except NoNodeError:
        return []


def _assignment(zk: KazooClient, topic: str) -> tuple[TopicAssignment, int]:
    try:
        data, stat = zk.get(zkpaths.topic_path(topic))
    except NoNodeError:
        raise AdminError(f"unknown topic {topic!r}") from None
    return TopicAssignment.decode(data), stat.version


def describe_topic(zk: KazooClient, topic: str) -> dict[str, Any]:
    """{"topic", "partitions": [{"partition", "leader", "leader_epoch",
    "replicas", "isr"}]}; leader -1 and empty ISR when there is none yet."""
    ta, _ = _assignment(zk, topic)
    parts = sorted(ta.partitions)
    out = []
    for p in parts:
        try:
            lai = zkpaths.read_leader_and_isr(zk, topic, p)
            leader, epoch, isr = lai.leader, lai.leader_epoch, list(lai.isr)
        except NoNodeError:
            leader, epoch, isr = zkpaths.NO_LEADER, -1, []
        out.append({"partition": p, "leader": leader, "leader_epoch": epoch,
                    "replicas": list(ta.partitions[p]), "isr": isr})
    return {"topic": topic, "topic_id": ta.topic_id, "partitions": out,
            "marked_for_deletion": zk.exists(zkpaths.delete_topic_path(topic)) is not None}


def state_log(zk: KazooClient, topic: str | None = None, partition: int | None = None
              ) -> list[dict[str, Any]]:
    """State-change records (docs/design.md#state-change-log), oldest first."""
    return read_state_log(zk, topic, partition)


# ---------------------------------------------------------------- writing
def live_ids(zk: KazooClient) -> list[int]:
    """The ids of the live brokers, ascending."""
    return [b["id"] for b in brokers(zk)]


def valid_topic_name(topic: str) -> bool:
    return bool(TOPIC_RE.match(topic)) and topic not in (".", "..")


def _check_topic_name(topic: str) -> None:
    if not valid_topic_name(topic):
        raise UsageError(f"illegal topic name {topic!r}: use 1-249 of [a-zA-Z0-9._-]")


def _mode(mode: Coordination | None) -> Coordination:
    """The coordination mode a command runs in: the controller's unless named."""
    return mode if mode is not None else modes.of("controller")


def create_topic(zk: KazooClient, topic: str, partitions: int, replication_factor: int,
                 replica_assignment: dict[int, list[int]] | None = None,
                 mode: Coordination | None = None, timeout: float = 30.0) -> dict[int, list[int]]:
    """Create the topic (docs/design.md#topics); its leaders are elected
    next (wait_for_leaders). Without replica_assignment, replicas go
    round-robin over the live brokers as Kafka's AdminUtils does. Returns
    the assignment."""
    _check_topic_name(topic)
    if replica_assignment is None:
        if partitions < 1 or replication_factor < 1:
            raise UsageError("partitions and replication factor must be at least 1")
        live = live_ids(zk)
        if replication_factor > len(live):
            raise AdminError(f"replication factor {replication_factor} larger than the "
                             f"{len(live)} live brokers")
        try:
            replica_assignment = assign_replicas(live, partitions, replication_factor)
        except AssignmentError as e:
            raise AdminError(str(e)) from None
    else:
        replica_assignment = {int(p): [int(b) for b in r] for p, r in replica_assignment.items()}
        if not replica_assignment:
            raise UsageError("empty replica assignment")
        if sorted(replica_assignment) != list(range(len(replica_assignment))):
            raise UsageError("partitions of a replica assignment must be 0..n-1")
        for p, r in replica_assignment.items():
            if not r or len(set(r)) != len(r):
                raise UsageError(f"partition {p}: replicas {r} must be distinct and non-empty")
        if len({len(r) for r in replica_assignment.values()}) != 1:
            raise UsageError("all partitions need the same number of replicas")
    _mode(mode).create_topic(zk, topic, replica_assignment, timeout)
    return replica_assignment


def delete_topic(zk: KazooClient, topic: str, wait: bool = False, timeout: float = 30.0,
                 mode: Coordination | None = None) -> list[int]:
    """Delete the topic (the controller: mark it for deletion). With wait,
    return when /brokers/topics/T and its deletion mark are gone (the
    controller removes the mark last: until then the topic cannot be created
    again). Returns the brokers that were down and remove their replicas
    when they come back."""
    _assignment(zk, topic)
    down = _mode(mode).delete_topic(zk, topic, timeout)
    if wait:
        _wait(lambda: (zk.exists(zkpaths.topic_path(topic)) is None
                       and zk.exists(zkpaths.delete_topic_path(topic)) is None), timeout,
              f"topic {topic!r} still exists after {timeout}s")
    return down


def add_partitions(zk: KazooClient, topic: str, count: int,
                   replica_assignment: dict[int, list[int]] | None = None,
                   mode: Coordination | None = None, timeout: float = 30.0
                   ) -> dict[int, list[int]]:
    """Grow the topic to `count` partitions (docs/design.md#partitions).
    Returns the new partitions' replicas."""
    new = plan_new_partitions(zk, topic, count, replica_assignment)
    _mode(mode).add_partitions(zk, topic, new, timeout)
    return new


def plan_new_partitions(zk: KazooClient, topic: str, count: int,
                        replica_assignment: dict[int, list[int]] | None = None
                        ) -> dict[int, list[int]]:
    """The replicas of the partitions that grow `topic` to `count`: the
    given ones, checked, or assigned over the live brokers as Kafka does."""
    ta, _ = _assignment(zk, topic)
    have = len(ta.partitions)
    if count <= have:
        raise AdminError(f"topic {topic!r} already has {have} partitions; "
                         f"the new count must be larger")
    rf = len(next(iter(ta.partitions.values())))
    if replica_assignment is None:
        live = live_ids(zk)
        if rf > len(live):
            raise AdminError(f"replication factor {rf} larger than the {len(live)} live brokers")
        first = ta.partitions[0][0] if 0 in ta.partitions else -1
        ids = sorted(live)
        start = ids.index(first) if first in ids else -1
        try:
            new = assign_replicas(live, count - have, rf, start_index=start, start_partition=have)
        except AssignmentError as e:
            raise AdminError(str(e)) from None
    else:
        new = {int(p): [int(b) for b in r] for p, r in replica_assignment.items()}
        if sorted(new) != list(range(have, count)):
            raise UsageError(f"the assignment must cover partitions {have}..{count - 1}")
    return new


def remove_partitions(zk: KazooClient, topic: str, partitions: list[int],
                      mode: Coordination | None = None, timeout: float = 30.0) -> list[int]:
    """Remove partitions of the topic, all in one request
    (docs/design.md#partitions). Returns the brokers that were down and
    remove their replicas when they come back."""
    check_removal(topic, _assignment(zk, topic)[0], partitions)
    return _mode(mode).remove_partitions(zk, topic, sorted(set(partitions)), timeout)


def check_removal(topic: str, ta: TopicAssignment, partitions: list[int]) -> None:
    """Refuse removing partitions the topic does not have, or all of them."""
    missing = sorted(set(partitions) - set(ta.partitions))
    if missing:
        raise AdminError(f"topic {topic!r} has no partitions {missing}")
    if set(partitions) >= set(ta.partitions):
        raise UsageError(f"that would remove every partition of {topic!r}: delete the topic instead")


def parse_plan(text: str) -> dict[tuple[str, int], list[int]]:
    """Kafka's reassignment JSON: {"version": 1, "partitions": [{"topic",
    "partition", "replicas"}]}."""
    try:
        d = json.loads(text)
        entries = d["partitions"]
        plan = {}
        for e in entries:
            tp = (str(e["topic"]), int(e["partition"]))
            replicas = [int(b) for b in e["replicas"]]
            if tp in plan:
                raise UsageError(f"partition {tp[0]}-{tp[1]} appears twice in the plan")
            plan[tp] = replicas
    except UsageError:
        raise
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"bad reassignment plan: {e!r}") from None
    if not plan:
        raise UsageError("the reassignment plan lists no partitions")
    return plan


def reassign(zk: KazooClient, plan: dict[tuple[str, int], list[int]], wait: bool = False,
             timeout: float = 60.0, mode: Coordination | None = None) -> dict[str, Any]:
    """Start a reassignment (KAFKA-42). With wait, wait until the controller
    (in V2: each partition's leader) is done with every partition, then
    report success only if each partition's AR equals the requested replicas."""
    for (t, p), r in plan.items():
        ta, _ = _assignment(zk, t)
        if p not in ta.partitions:
            raise AdminError(f"topic {t!r} has no partition {p}")
        if not r or len(set(r)) != len(r):
            raise UsageError(f"{t}-{p}: replicas {r} must be distinct and non-empty")
    mode = _mode(mode)
    mode.start_reassignment(zk, plan)
    result: dict[str, Any] = {"started": True, "done": False, "partitions": []}
    if not wait:
        return result
    wait_until(lambda: not mode.reassigning(zk, set(plan)), timeout, 0.1)
    return _reassign_result(zk, plan, mode.reassigning(zk, set(plan)), result)


def _reassign_result(zk: KazooClient, plan: dict[tuple[str, int], list[int]],
                     left: set[tuple[str, int]], result: dict[str, Any]) -> dict[str, Any]:
    """Each partition's status: in progress (`left`), done (AR is what was
    asked for) or failed."""
    ok = True
    for (t, p), r in sorted(plan.items()):
        try:
            ar = list(_assignment(zk, t)[0].partitions.get(p, ()))
        except AdminError:
            ar = []
        status = "in progress" if (t, p) in left else ("done" if ar == list(r) else "failed")
        ok &= status == "done"
        result["partitions"].append({"topic": t, "partition": p, "requested": list(r),
                                     "replicas": ar, "status": status})
    result["done"] = ok
    return result


def preferred_election(zk: KazooClient, topic: str | Iterable[str] | None = None,
                       mode: Coordination | None = None, timeout: float = 30.0
                       ) -> list[tuple[str, int]]:
    """Ask for leadership back on the preferred replicas of a topic, of
    several, or of every topic; the partitions asked for. The controller
    carries it out and removes the request; in V2 the leaders resign
    themselves while the request is there: wait up to `timeout` for them,
    remove it, and fail naming the partitions whose preferred replica could
    lead and does not."""
    if topic is None:
        topics = list_topics(zk)
    else:
        topics = [topic] if isinstance(topic, str) else sorted(topic)
    tps: list[tuple[str, int]] = []
    for t in topics:
        ta, _ = _assignment(zk, t)
        tps += [(t, p) for p in sorted(ta.partitions)]
    if not tps:
        raise AdminError("no partitions to elect")
    stuck = _mode(mode).elect_preferred(zk, tps, timeout)
    if stuck:
        raise AdminError(f"after {timeout:g} s the preferred replica, live and in sync, does "
                         f"not lead {', '.join(f'{t}-{p}' for t, p in stuck)}; try again")
    return tps


def wait_for_leaders(zk: KazooClient, topic: str, timeout: float = 30.0) -> dict[str, Any]:
    """Wait until every partition of the topic has a leader; returns describe_topic."""
    def ready():
        d = describe_topic(zk, topic)
        return d if all(p["leader"] >= 0 for p in d["partitions"]) else None
    return _wait(ready, timeout, f"topic {topic!r} has partitions without a leader after {timeout}s")


def _wait(cond, timeout: float, msg: str):
    v = wait_until(cond, timeout, 0.1)
    if not v:
        raise AdminError(msg)
    return v


# ---------------------------------------------------------------- CLI
# -- users (docs/design.md#security) ------------------------------------------------------

def set_user(zk: KazooClient, user: str, password: str,
             mechanisms: Iterable[str] = ("SCRAM-SHA-256", "SCRAM-SHA-512")) -> None:
    """Create or replace a user's SCRAM credentials, as Kafka's kafka-configs
    --add-config 'SCRAM-SHA-512=[password=...]' does: the salted keys, never
    the password. PLAIN is checked against them too."""
    if not user or "/" in user:
        raise AdminError(f"bad user name {user!r}: not empty, no '/'")
    if not password:
        raise AdminError(f"user {user}: an empty password")
    try:
        config = {m: make_credential(m, password).to_config() for m in mechanisms}
    except ValueError as e:
        raise AdminError(str(e)) from None
    path = zkpaths.user_config_path(user)
    data = zkpaths.encode_user_config(config)
    zk.ensure_path(zkpaths.CONFIG_USERS)
    try:
        zk.set(path, data)
    except NoNodeError:
        zk.create(path, data)


def delete_user(zk: KazooClient, user: str) -> None:
    try:
        zk.delete(zkpaths.user_config_path(user))
    except NoNodeError:
        raise AdminError(f"no user {user!r}") from None


def list_users(zk: KazooClient) -> dict[str, list[str]]:
    """Each user and the mechanisms it has credentials for (no credential)."""
    try:
        users = zk.get_children(zkpaths.CONFIG_USERS)
    except NoNodeError:
        return {}
    out = {}
    for user in sorted(users):
        try:
            out[user] = sorted(zkpaths.decode_user_config(zk.get(zkpaths.user_config_path(user))[0]))
        except NoNodeError:
            continue
    return out


def connect(hosts: str, timeout: float = 10.0) -> KazooClient:
    zk = KazooClient(hosts=hosts, timeout=timeout, connection_retry={"max_tries": 1})
    try:
        zk.start(timeout=timeout)
    except (KazooTimeoutError, Exception) as e:
        try:
            zk.stop()
            zk.close()
        except Exception:
            pass
        raise AdminError(f"cannot reach ZooKeeper at {hosts} within {timeout:g}s ({type(e).__name__})") from None
    return zk


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `admin` on an argparse subparsers object."""
    p = subparsers.add_parser("admin", help="topics, reassignment, elections, controller info",
                              description="Administer a chaoslog cluster through ZooKeeper.")
    p.add_argument("--zookeeper", default="127.0.0.1:2181", metavar="HOST:PORT[/chroot]",
                   help="ZooKeeper connect string (default %(default)s)")
    p.add_argument("--zk-timeout", type=float, default=10.0, metavar="S",
                   help="give up connecting to ZooKeeper after S seconds")
    p.add_argument("--coordination", choices=COORDINATION_MODES, default="controller",
                   help="the brokers' coordination mode (docs/design.md#v2-admin): with v2 "
                        "the topic commands tell the brokers through their state-change queues")
    p.set_defaults(func=run, admin_cmd=None)
    sub = p.add_subparsers(dest="admin_cmd", metavar="COMMAND")

    def leaf(parent, name, help_):
        q = parent.add_parser(name, help=help_)
        # --zookeeper also accepted after the subcommand
        q.add_argument("--zookeeper", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        q.add_argument("--coordination", choices=COORDINATION_MODES, default=argparse.SUPPRESS,
                       help=argparse.SUPPRESS)
        q.set_defaults(func=run)
        return q

    topics = sub.add_parser("topics", help="create, delete, describe topics")
    topics.set_defaults(func=run, topics_cmd=None)
    tsub = topics.add_subparsers(dest="topics_cmd", metavar="ACTION")
    c = leaf(tsub, "create", "create a topic")
    c.add_argument("--topic", required=True)
    c.add_argument("--partitions", type=int, default=1)
    c.add_argument("--replication-factor", type=int, default=1)
    c.add_argument("--replica-assignment", metavar="B:B,B:B",
                   help="explicit replicas: partitions separated by commas, replicas by colons")
    c.add_argument("--wait", action="store_true", help="wait until every partition has a leader")
    c.add_argument("--timeout", type=float, default=30.0)
    c.add_argument("--json", action="store_true")
    d = leaf(tsub, "delete", "delete a topic")
    d.add_argument("--topic", required=True)
    d.add_argument("--wait", action="store_true")
    d.add_argument("--timeout", type=float, default=30.0)
    ds = leaf(tsub, "describe", "leader, epoch, replicas and ISR of each partition")
    ds.add_argument("--topic")
    ds.add_argument("--json", action="store_true")
    ls = leaf(tsub, "list", "list topics")
    ls.add_argument("--json", action="store_true")
    a = leaf(tsub, "add-partitions", "grow a topic")
    a.add_argument("--topic", required=True)
    a.add_argument("--partitions", type=int, required=True, help="the new total")
    a.add_argument("--json", action="store_true")
    rp = leaf(tsub, "remove-partitions", "remove partitions of a topic")
    rp.add_argument("--topic", required=True)
    rp.add_argument("--partitions", required=True, metavar="P,P",
                    help="the partitions to remove, separated by commas")
    rp.add_argument("--json", action="store_true")

    r = leaf(sub, "reassign", "move partition replicas (KAFKA-42)")
    r.add_argument("--plan", required=True, metavar="FILE",
                   help='{"version":1,"partitions":[{"topic","partition","replicas"}]}')
    r.add_argument("--wait", action="store_true")
    r.add_argument("--timeout", type=float, default=60.0)
    r.add_argument("--json", action="store_true")
    pe = leaf(sub, "preferred-election", "move leaders back to preferred replicas")
    pe.add_argument("--topic")
    pe.add_argument("--timeout", type=float, default=30.0,
                    help="with --coordination v2: how long to wait for the leaders to move")
    pe.add_argument("--json", action="store_true")
    ci = leaf(sub, "controller", "active controller id and epoch")
    ci.add_argument("--json", action="store_true")
    b = leaf(sub, "brokers", "live brokers")
    b.add_argument("--json", action="store_true")
    sl = leaf(sub, "state-log", "state-change log records")
    sl.add_argument("--topic")
    sl.add_argument("--partition", type=int)
    sl.add_argument("--json", action="store_true")
    return p


def _parse_assignment(text: str) -> dict[int, list[int]]:
    try:
        return {p: [int(b) for b in part.split(":")] for p, part in enumerate(text.split(","))}
    except ValueError:
        raise UsageError(f"bad --replica-assignment {text!r}: expected e.g. 1:2,2:3") from None


def _out(args: argparse.Namespace, obj: Any, text: str) -> None:
    print(json.dumps(obj, sort_keys=True) if getattr(args, "json", False) else text)


def _parse_partitions(text: str) -> list[int]:
    try:
        return sorted({int(x) for x in text.split(",")})
    except ValueError:
        raise UsageError(f"bad --partitions {text!r}: expected e.g. 1,2") from None


def _dispatch(zk: KazooClient, args: argparse.Namespace) -> int:
    cmd = args.admin_cmd
    mode = modes.of(args.coordination)
    # A V2 command has done its part when it returns; a controller-mode one
    # has asked the controller (docs/design.md#v2-admin).
    done = mode.waits_for_brokers
    if cmd in ("controller", "state-log") and not mode.has_controller:
        raise UsageError(f"{cmd} is not built for --coordination {mode.name} "
                         "(docs/design.md#v2-admin: V2 has no controller)")
    if cmd == "topics":
        tc = args.topics_cmd
        if tc == "create":
            ra = _parse_assignment(args.replica_assignment) if args.replica_assignment else None
            got = create_topic(zk, args.topic, args.partitions, args.replication_factor, ra,
                               mode, args.timeout)
            if args.wait:
                wait_for_leaders(zk, args.topic, args.timeout)
            _out(args, {"topic": args.topic, "replicas": {str(p): r for p, r in got.items()}},
                 f"created topic {args.topic}: " + " ".join(f"{p}:{r}" for p, r in sorted(got.items())))
        elif tc == "delete":
            down = delete_topic(zk, args.topic, args.wait, args.timeout, mode)
            print(f"topic {args.topic} {'deleted' if args.wait or done else 'marked for deletion'}"
                  + (f"; brokers {down} are down and remove their replicas when they come back"
                     if down else ""))
        elif tc == "describe":
            topics = [args.topic] if args.topic else list_topics(zk)
            descs = [describe_topic(zk, t) for t in topics]
            if args.json:
                print(json.dumps(descs[0] if args.topic else descs, sort_keys=True))
            else:
                for dsc in descs:
                    print(f"topic {dsc['topic']}: {len(dsc['partitions'])} partitions"
                          + (" (marked for deletion)" if dsc["marked_for_deletion"] else ""))
                    for prt in dsc["partitions"]:
                        print(f"  partition {prt['partition']}: leader {prt['leader']} "
                              f"epoch {prt['leader_epoch']} replicas {prt['replicas']} isr {prt['isr']}")
        elif tc == "list":
            t = list_topics(zk)
            _out(args, t, "\n".join(t))
        elif tc == "add-partitions":
            got = add_partitions(zk, args.topic, args.partitions, mode=mode)
            _out(args, {"topic": args.topic, "added": {str(p): r for p, r in got.items()}},
                 f"{'added' if done else 'requested'} partitions {sorted(got)} for {args.topic}")
        elif tc == "remove-partitions":
            parts = _parse_partitions(args.partitions)
            down = remove_partitions(zk, args.topic, parts, mode)
            _out(args, {"topic": args.topic, "removed" if done else "removing": parts, "down": down},
                 f"{'removed' if done else 'requested the removal of'} partitions {parts} "
                 f"of {args.topic}")
        else:
            raise UsageError("topics needs an action: create, delete, describe, list, "
                             "add-partitions, remove-partitions")
    elif cmd == "reassign":
        try:
            text = Path(args.plan).read_text()
        except OSError as e:
            raise UsageError(f"cannot read plan {args.plan}: {e.strerror}") from None
        res = reassign(zk, parse_plan(text), args.wait, args.timeout, mode)
        if args.json:
            print(json.dumps(res, sort_keys=True))
        elif not args.wait:
            print("reassignment started")
        else:
            for e in res["partitions"]:
                print(f"{e['topic']}-{e['partition']}: {e['status']} (replicas {e['replicas']}, "
                      f"requested {e['requested']})")
        if args.wait and not res["done"]:
            print("error: reassignment did not complete as requested", file=sys.stderr)
            return 1
    elif cmd == "preferred-election":
        tps = preferred_election(zk, args.topic, mode, args.timeout)
        _out(args, {"partitions": [{"topic": t, "partition": p} for t, p in tps]},
             f"preferred replica election requested for {len(tps)} partitions")
    elif cmd == "controller":
        info = controller_info(zk)
        _out(args, info, f"controller {info['id']} epoch {info['epoch']}")
    elif cmd == "brokers":
        bs = brokers(zk)
        _out(args, bs, "\n".join(f"{b['id']} {b['host']}:{b['port']} start_epoch {b['start_epoch']}"
                                 for b in bs))
    elif cmd == "state-log":
        if args.partition is not None and args.topic is None:
            raise UsageError("--partition needs --topic")
        recs = state_log(zk, args.topic, args.partition)
        if args.json:
            print(json.dumps(recs, sort_keys=True))
        else:
            for r in recs:
                where = f"{r['topic']}-{r['partition']}" if r.get("topic") is not None else "-"
                print(f"{r['time']:.3f} c{r['controller_id']}/e{r['controller_epoch']} {r['event']} "
                      f"{r['kind']} {where} {r['from']} -> {r['to']} leader {r['leader']} "
                      f"epoch {r['leader_epoch']} isr {r['isr']} broker {r['target_broker']}"
                      + (f" ({r['note']})" if r.get("note") else ""))
    else:
        raise UsageError("admin needs a command: topics, reassign, preferred-election, "
                         "controller, brokers, state-log")
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point for `chaoslog admin ...`: 0 ok, 1 failed request, 2 usage."""
    if getattr(args, "admin_cmd", None) is None:
        print("error: admin needs a command: topics, reassign, preferred-election, controller, "
              "brokers, state-log", file=sys.stderr)
        return 2
    if args.admin_cmd == "topics" and getattr(args, "topics_cmd", None) is None:
        print("error: topics needs an action: create, delete, describe, list, add-partitions",
              file=sys.stderr)
        return 2
    try:
        zk = connect(args.zookeeper, args.zk_timeout)
    except AdminError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        return _dispatch(zk, args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except AdminError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        try:
            zk.stop()
            zk.close()
        except Exception:
            pass


def main(argv: list[str] | None = None) -> int:
    """`python -m cluster.admin ...` (same as `chaoslog admin ...`)."""
    parser = argparse.ArgumentParser(prog="chaoslog")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["admin", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
