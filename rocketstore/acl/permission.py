"""Permission bits of RocketMQ 4.x plain ACL and the request codes that need an admin.

A permission is a small bit set: ``DENY`` 1, ``ANY`` 2, ``PUB`` 4, ``SUB`` 8. An account owns
one per resource (``topicPerms``/``groupPerms``) plus a default for topics and one for groups;
a request needs ``PUB`` or ``SUB`` on each resource it touches. Groups are kept under their
retry topic name (``%RETRY%<group>``), which is how RocketMQ tells a group from a topic.
"""
from __future__ import annotations

import logging

from rocketstore.common.codes import RequestCode

log = logging.getLogger("rocketstore.acl")

DENY = 1
ANY = 1 << 1
PUB = 1 << 2
SUB = 1 << 3

RETRY_PREFIX = "%RETRY%"

# RocketMQ's Permission.ADMIN_CODE: codes only an ``admin: true`` account may send
ADMIN_CODES = frozenset({
    int(RequestCode.UPDATE_AND_CREATE_TOPIC),
    25,      # UPDATE_BROKER_CONFIG
    215,     # DELETE_TOPIC_IN_BROKER
    200,     # UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
    207,     # DELETE_SUBSCRIPTIONGROUP
})

_NAMES = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}


def parse_perm(text: object) -> int:
    """A permission as written in ``plain_acl.yml``: ``DENY``, ``PUB``, ``SUB``, ``PUB|SUB``
    (or ``SUB|PUB``). Missing or unknown text is ``DENY``, as RocketMQ reads it.

    >>> parse_perm("PUB|SUB") == PUB | SUB, parse_perm(None) == DENY
    (True, True)
    """
    if text is None:
        return DENY
    perm = _NAMES.get(str(text).strip())
    if perm is None:
        # RocketMQ silently denies; say so, since it is most likely a typo
        log.warning("plain ACL: unknown permission %r read as DENY", text)
        return DENY
    return perm


def perm_name(perm: int) -> str:
    """``PUB``, ``SUB``, ``PUB|SUB``, ``DENY`` or ``ANY`` for messages."""
    if perm & DENY:
        return "DENY"
    names = [n for n, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit]
    return "|".join(names) or ("ANY" if perm & ANY else "DENY")


def check_permission(needed: int, owned: int) -> bool:
    """Whether ``owned`` grants ``needed`` (RocketMQ's ``Permission.checkPermission``):
    DENY in ``owned`` refuses everything, ANY needs PUB or SUB, else any shared bit.

    >>> check_permission(PUB, PUB | SUB), check_permission(SUB, PUB), check_permission(PUB, DENY)
    (True, False, False)
    """
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def retry_topic(group: str) -> str:
    """The resource name a group is checked under: ``%RETRY%<group>``."""
    return RETRY_PREFIX + group


def is_group_resource(resource: str) -> bool:
    return resource.startswith(RETRY_PREFIX)


def describe_resource(resource: str) -> str:
    """``topic:<name>`` or ``group:<name>`` (RocketMQ's ``PlainAccessResource.printStr``)."""
    if is_group_resource(resource):
        return f"group:{resource[len(RETRY_PREFIX):]}"
    return f"topic:{resource}"


def needs_admin(code: int) -> bool:
    return code in ADMIN_CODES
