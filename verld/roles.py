"""Who may do what: peer credentials (SO_PEERCRED) → role.

The highest matching role wins; root and the daemon's own (effective) uid are always
admin, whatever the lists say. With no lists configured,
any peer the socket's file mode lets in is a controller. Otherwise a peer matching
no list is an observer while the observer lists are empty, and is refused (None)
when they are not. The peer's supplementary groups (from the user database) count.
"""

from __future__ import annotations

import os
import pwd

from verld.config import RoleList, RolesConfig

ROLE_RANK = {"observer": 0, "controller": 1, "admin": 2}


def peer_groups(uid: int, gid: int) -> set[int]:
    """The peer's primary gid plus the supplementary groups of its user."""
    groups = {gid}
    try:
        name = pwd.getpwuid(uid).pw_name
        groups.update(os.getgrouplist(name, gid))
    except (KeyError, OSError):
        pass
    return groups


def _matches(rl: RoleList, uid: int, groups: set[int]) -> bool:
    return uid in rl.uids or not groups.isdisjoint(rl.gids)


def role_for(uid: int, gid: int, roles: RolesConfig, own_uid: int | None = None) -> str | None:
    """The role granted to a peer, or None when it must be refused. `own_uid`: the
    daemon's uid (None: this process's effective uid), admin like root."""
    if uid in (0, os.geteuid() if own_uid is None else own_uid):
        return "admin"
    lists = (("admin", roles.admin), ("controller", roles.controller), ("observer", roles.observer))
    if not any(rl.uids or rl.gids for _, rl in lists):
        return "controller"
    groups = peer_groups(uid, gid)
    for name, rl in lists:
        if _matches(rl, uid, groups):
            return name
    if roles.observer.uids or roles.observer.gids:
        return None
    return "observer"
