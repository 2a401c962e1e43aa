"""Access control compatible with RocketMQ 4.x plain ACL (docs/acl.md).

The broker side (``PlainAccessValidator``) reads ``plain_acl.yml``, checks each request's
signature and permissions, and re-reads the file when it changes; it is off unless the
broker's ``aclEnable`` is true. The client side is ``SessionCredentials``: a producer or
consumer given credentials signs every request it sends.
"""
from __future__ import annotations

from rocketstore.acl.config import PlainAccount, PlainAclConfig, load_plain_acl, parse_plain_acl
from rocketstore.acl.signature import SessionCredentials, calc_signature, combine_request_content
from rocketstore.acl.validator import (AccessRequest, PlainAccessValidator, access_request,
                                       authenticate_request, authorize_request, check_request,
                                       parse_request)

__all__ = [
    "SessionCredentials", "PlainAccessValidator", "PlainAclConfig", "PlainAccount",
    "AccessRequest", "parse_plain_acl", "load_plain_acl", "parse_request", "check_request",
    "calc_signature", "combine_request_content", "access_request", "authenticate_request",
    "authorize_request",
]
