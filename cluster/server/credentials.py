"""The SCRAM credentials of /config/users, kept in memory by ZooKeeper
watches (docs/design.md#security), as Kafka's credential cache is.

An authentication reads this cache, never ZooKeeper: the event loop does not
wait on ZooKeeper, and a broker cut off from it still knows the users it
knew. A user added or changed is seen when its watch fires.
"""
from __future__ import annotations

import logging
import threading

from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from cluster import zkpaths
from cluster.server.sasl import ScramCredential

log = logging.getLogger(__name__)


class CredentialCache:
    def __init__(self, kazoo):
        self.kazoo = kazoo
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._watched: set[str] = set()

    def start(self) -> None:
        """Blocking: the first read happens here (kazoo's watch recipes read
        at once), so a broker knows its users before it listens."""
        ChildrenWatch(self.kazoo, zkpaths.CONFIG_USERS, self._children)

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        with self._lock:
            return self._users.get(user, {}).get(mechanism)

    def _children(self, users: list[str]) -> None:
        with self._lock:
            new = set(users) - self._watched
            self._watched |= new
        for user in new:
            self._watch(user)

    def _watch(self, user: str) -> None:
        def changed(data, _stat):   # two arguments: kazoo passes a third to a function taking three
            return self._changed(user, data)
        DataWatch(self.kazoo, zkpaths.user_config_path(user), changed)

    def _changed(self, user: str, data: bytes | None) -> bool:
        creds: dict[str, ScramCredential] = {}
        if data is not None:
            for mechanism, text in zkpaths.decode_user_config(data).items():
                try:
                    creds[mechanism] = ScramCredential.from_config(text)
                except ValueError as e:
                    log.warning("user %s: ignoring its %s credential: %s", user, mechanism, e)
        with self._lock:
            if data is None:
                self._users.pop(user, None)
                self._watched.discard(user)
            else:
                self._users[user] = creds
        return data is not None   # False ends the watch of a deleted user
