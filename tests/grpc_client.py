"""The official RocketMQ 5.x Python client (``rocketmq-python-client``), run in its own venv.

It installs a top-level package ``rocketmq`` that clashes with the 4.x ``rocketmq`` 0.4.4 of the
test extra, and importing it rewires logging (docs/grpc.md), so it never runs in the test
process: ``ClientVenv.run(script)`` runs a small script in a separate interpreter and returns
the JSON the script printed last. The venv is made once per version, in pytest's cache
directory (``ROCKETSTORE_GRPC_CLIENT_VENV`` names another).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

CLIENT_VERSION = "5.1.2"

PRELUDE = '''
import json, os, sys, time
from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer, TransactionChecker, TransactionResolution)
ENDPOINT = os.environ["PROXY_ENDPOINT"]
CONFIG = ClientConfiguration(ENDPOINT, Credentials())
def out(**kw):
    print("RESULT " + json.dumps(kw), flush=True)
def msg(topic, body, tag=None, keys=(), props=None, group=None, deliver_at=None):
    m = Message()
    m.topic = topic
    m.body = body.encode() if isinstance(body, str) else body
    if tag: m.tag = tag
    for k in keys: m.keys = k
    for k, v in (props or {}).items(): m.add_property(k, v)
    if group: m.message_group = group
    if deliver_at: m.delivery_timestamp = deliver_at
    return m
def view(m):
    return dict(id=m.message_id, body=m.body.decode(), tag=m.tag, keys=list(m.keys or ()),
                props=dict(m.properties or {}), attempt=m.delivery_attempt,
                group=m.message_group, type=m.message_type,
                deliver=m.delivery_timestamp, topic=m.topic)
def send_as(ak, sk, topic, body="signed"):
    """One send by a producer signing as ak/sk: "sent", or the client's error as text."""
    p = Producer(ClientConfiguration(ENDPOINT, Credentials(ak, sk)), (topic,))
    try:
        p.startup()
        p.send(msg(topic, body))
        return "sent"
    except Exception as e:
        return type(e).__name__ + ": " + str(e)
    finally:
        try:
            p.shutdown()
        except Exception:
            pass
def receive_until(consumer, want, invisible=15, limit=30.0, batch=32):
    got = []
    end = time.time() + limit
    while len(got) < want and time.time() < end:
        got += consumer.receive(batch, invisible)
    return got
'''


class ClientVenv:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = root / "bin" / "python"

    def ensure(self) -> None:
        marker = self.root / ".installed"
        if marker.exists():
            return
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(self.root)], check=True)
        subprocess.run([str(self.python), "-m", "pip", "install", "-q",
                        f"rocketmq-python-client=={CLIENT_VERSION}"], check=True, timeout=900)
        marker.write_text(CLIENT_VERSION)

    def run(self, script: str, endpoint: str, home: Path, timeout: float = 120.0,
            env: dict[str, str] | None = None) -> dict:
        """Run ``PRELUDE + script``; its last ``RESULT {...}`` line as a dict."""
        home.mkdir(parents=True, exist_ok=True)
        code = PRELUDE + textwrap.dedent(script)
        p = subprocess.run([str(self.python), "-c", code], capture_output=True, text=True,
                           timeout=timeout, cwd=home,
                           env=dict(os.environ, HOME=str(home), PROXY_ENDPOINT=endpoint,
                                    PYTHONPATH="", **(env or {})))
        results = [line[7:] for line in p.stdout.splitlines() if line.startswith("RESULT ")]
        if p.returncode != 0 or not results:
            raise AssertionError(f"client script failed (rc {p.returncode}):\n{p.stdout[-3000:]}"
                                 f"\n{p.stderr[-5000:]}")
        return json.loads(results[-1])
