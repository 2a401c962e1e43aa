"""``plain_acl.yml``: RocketMQ 4.x plain ACL accounts and white addresses.

::

    globalWhiteRemoteAddresses:        # these hosts need no signature at all
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ            # more than 6 characters
        secretKey: 12345678            # more than 6 characters
        whiteRemoteAddress:            # this account's hosts need no signature either
        admin: false                   # admins may create/delete topics and groups
        defaultTopicPerm: DENY         # for topics not listed below (missing: DENY)
        defaultGroupPerm: SUB          # for groups not listed below (missing: DENY)
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB, groupC=SUB]

The file is parsed with PyYAML's safe loader (``pip install rocketstore[acl]``).
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from rocketstore.acl import permission
from rocketstore.acl.address import Matcher, compile_pattern
from rocketstore.errors import AclConfigError

log = logging.getLogger("rocketstore.acl")

KEY_MIN_LENGTH = 6      # AclConstants.ACCESS_KEY_MIN_LENGTH: keys must be longer than this


@dataclasses.dataclass(frozen=True)
class PlainAccount:
    """One ``accounts`` entry. ``resource_perms`` maps topics, and groups as
    ``%RETRY%<group>``, to permission bits."""

    access_key: str
    secret_key: str
    white_remote_address: str | None
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    resource_perms: Mapping[str, int]
    white: Matcher = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class PlainAclConfig:
    """The whole file: global white address matchers and accounts by access key."""

    global_white: tuple[Matcher, ...]
    global_white_patterns: tuple[str, ...]
    accounts: Mapping[str, PlainAccount]

    @classmethod
    def empty(cls) -> "PlainAclConfig":
        return cls((), (), {})


def _load_yaml(text: str, path: str) -> Any:
    try:
        import yaml  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        raise AclConfigError(path, "file", path, "reading plain_acl.yml needs PyYAML: "
                             "pip install 'rocketstore[acl]'") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise AclConfigError(path, "file", path, f"not YAML: {e}") from None


def _bool(value: Any, path: str, field: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise AclConfigError(path, field, value, "expected true or false")


def _string_list(value: Any, path: str, field: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, int, float)):
        value = [value]          # a single entry written without a list
    if not isinstance(value, list):
        raise AclConfigError(path, field, value, "expected a list")
    return [str(v) for v in value if v is not None]


def _resource_perms(entries: list[str], is_topic: bool, path: str, field: str,
                    out: dict[str, int]) -> None:
    for entry in entries:
        items = [i for i in entry.split("=") if i != ""]
        if len(items) != 2:
            raise AclConfigError(path, field, entry, "expected resource=PERM, e.g. topicA=SUB")
        name = items[0].strip()
        out[name if is_topic else permission.retry_topic(name)] = permission.parse_perm(items[1])


def parse_account(doc: Any, path: str, index: int) -> PlainAccount:
    """One account mapping; raises ``AclConfigError`` naming the field."""
    where = f"accounts[{index}]"
    if not isinstance(doc, dict):
        raise AclConfigError(path, where, doc, "expected a mapping")
    ak = doc.get("accessKey")
    sk = doc.get("secretKey")
    ak = None if ak is None else str(ak)
    sk = None if sk is None else str(sk)      # YAML reads secretKey: 12345678 as a number
    if ak is None or len(ak) <= KEY_MIN_LENGTH:
        raise AclConfigError(path, f"{where}.accessKey", ak,
                             f"must be longer than {KEY_MIN_LENGTH} characters")
    if sk is None or len(sk) <= KEY_MIN_LENGTH:
        raise AclConfigError(path, f"{where}.secretKey", "***" if sk else sk,
                             f"must be longer than {KEY_MIN_LENGTH} characters")
    white = doc.get("whiteRemoteAddress")
    white = None if white is None else str(white)
    perms: dict[str, int] = {}
    # groups first, topics second: a name in both ends up as the topic (RocketMQ's order)
    _resource_perms(_string_list(doc.get("groupPerms"), path, f"{where}.groupPerms"), False,
                    path, f"{where}.groupPerms", perms)
    _resource_perms(_string_list(doc.get("topicPerms"), path, f"{where}.topicPerms"), True,
                    path, f"{where}.topicPerms", perms)
    return PlainAccount(
        access_key=ak, secret_key=sk, white_remote_address=white,
        admin=_bool(doc.get("admin"), path, f"{where}.admin"),
        default_topic_perm=permission.parse_perm(doc.get("defaultTopicPerm")),
        default_group_perm=permission.parse_perm(doc.get("defaultGroupPerm")),
        resource_perms=perms,
        white=compile_pattern(white, path, f"{where}.whiteRemoteAddress"))


def parse_plain_acl(text: str, path: str = "plain_acl.yml") -> PlainAclConfig:
    """Parse the text of a ``plain_acl.yml``. An empty file has no accounts (everything not
    white-listed is refused). A repeated access key keeps its first account, as RocketMQ
    does."""
    doc = _load_yaml(text, path)
    if doc is None:
        return PlainAclConfig.empty()
    if not isinstance(doc, dict):
        raise AclConfigError(path, "file", type(doc).__name__, "expected a mapping at the top")
    patterns = tuple(_string_list(doc.get("globalWhiteRemoteAddresses"), path,
                                  "globalWhiteRemoteAddresses"))
    matchers = tuple(compile_pattern(p, path, "globalWhiteRemoteAddresses") for p in patterns)
    raw = doc.get("accounts")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise AclConfigError(path, "accounts", raw, "expected a list of accounts")
    accounts: dict[str, PlainAccount] = {}
    for i, entry in enumerate(raw):
        acct = parse_account(entry, path, i)
        if acct.access_key in accounts:
            log.warning("%s: accessKey %s is defined again in accounts[%d]; the first one "
                        "counts", path, acct.access_key, i)
            continue
        accounts[acct.access_key] = acct
    return PlainAclConfig(matchers, patterns, accounts)


def load_plain_acl(path: str) -> PlainAclConfig:
    """Read and parse ``path`` (``OSError`` if it cannot be read)."""
    with open(path, encoding="utf-8") as f:
        return parse_plain_acl(f.read(), path)
