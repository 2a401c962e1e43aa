"""The request and response codes, under the remoting package's name.

The table lives in ``rocketstore.common.codes`` so that packages below the servers (``acl``)
reach it without importing ``remoting``; this module keeps the remoting-side name.
"""
from rocketstore.common.codes import *  # noqa: F401,F403
from rocketstore.common.codes import LanguageCode, RequestCode  # noqa: F401
