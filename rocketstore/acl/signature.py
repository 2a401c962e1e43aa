"""Request signatures of RocketMQ 4.x ACL, and credentials a client signs with.

The signed content is the values of the request's header fields (``extFields``) in the order
of their sorted names, concatenated as UTF-8, followed by the body. The ``Signature`` field
itself is left out (and, on the broker, ``_UNIQUE_KEY_QUERY``). The signature is
``Base64(HmacSHA1(secretKey, content))``. A client adds ``AccessKey`` (and ``SecurityToken``
when it has one) before signing, then ``Signature``.
"""
from __future__ import annotations

import base64
import dataclasses
import hmac
from collections.abc import Mapping

from rocketstore.errors import InvalidArgumentError

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"


def _java_text(v: object) -> str:
    # StringBuilder.append(null) writes "null"
    return "null" if v is None else str(v)


def combine_request_content(ext_fields: Mapping[str, object], body: bytes | memoryview | None,
                            *, skip: frozenset[str] = frozenset({SIGNATURE})) -> bytes:
    """What is signed: the field values sorted by field name, then the body."""
    # decoded header values are str already: only others go through _java_text
    text = "".join([v if v.__class__ is str else _java_text(v)
                    for v in [ext_fields[k] for k in sorted(ext_fields) if k not in skip]])
    head = text.encode("utf-8")
    return head + bytes(body) if body else head


def calc_signature(content: bytes, secret_key: str) -> str:
    """``Base64(HmacSHA1(secret_key, content))``."""
    # hmac.digest: OpenSSL's one-shot HMAC, no per-call Python HMAC object
    return base64.b64encode(hmac.digest(secret_key.encode("utf-8"), content, "sha1")
                            ).decode("ascii")


@dataclasses.dataclass(frozen=True)
class SessionCredentials:
    """An access key and its secret (and an optional security token) a client signs with.

    >>> SessionCredentials("RocketMQ", "12345678").access_key
    'RocketMQ'
    """

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __post_init__(self) -> None:
        for name in ("access_key", "secret_key"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v:
                raise InvalidArgumentError(name, v, "must be a non-empty string")
        if self.security_token is not None and not isinstance(self.security_token, str):
            raise InvalidArgumentError("security_token", self.security_token,
                                       "must be a string or None")

    def __repr__(self) -> str:      # never print the secret
        return f"SessionCredentials(access_key={self.access_key!r}, secret_key='***')"

    def sign(self, ext_fields: dict[str, str], body: bytes | memoryview | None) -> None:
        """Add ``AccessKey`` (``SecurityToken``) and ``Signature`` to ``ext_fields`` in place,
        as RocketMQ's ``AclClientRPCHook.doBeforeRequest`` does."""
        ext_fields.pop(SIGNATURE, None)
        ext_fields[ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            ext_fields[SECURITY_TOKEN] = self.security_token
        ext_fields[SIGNATURE] = calc_signature(combine_request_content(ext_fields, body),
                                               self.secret_key)


def credentials_from(credentials: SessionCredentials | None, access_key: str | None,
                     secret_key: str | None) -> SessionCredentials | None:
    """The credentials a client was given, either as an object or as two keys (not both)."""
    if credentials is not None:
        if access_key is not None or secret_key is not None:
            raise InvalidArgumentError("credentials", credentials,
                                       "give credentials= or access_key=/secret_key=, not both")
        if not isinstance(credentials, SessionCredentials):
            raise InvalidArgumentError("credentials", credentials,
                                       "expected a rocketstore.acl.SessionCredentials")
        return credentials
    if access_key is None and secret_key is None:
        return None
    if access_key is None or secret_key is None:
        missing = "secret_key" if secret_key is None else "access_key"
        raise InvalidArgumentError(missing, None, "access_key and secret_key go together")
    return SessionCredentials(access_key, secret_key)
