"""``rocketstore dlq list`` and ``dlq resend``: a consumer group's dead letters
(``%DLQ%<group>``, ``rocketstore.broker.dlq``).

list opens the store read-only (it works beside a running broker) and prints each dead letter
with its original topic, first message id, reconsume times, store time, keys and tags, and
whether it was resent. resend takes the store's lock: a running broker holds it, and then the
command says so and changes nothing (resend in the broker's process instead:
``DeadLetterQueue(broker, group).resend(...)``). Each dead letter is resent at most once;
``config/dlqResend.json`` records what was resent.
"""
from __future__ import annotations

import argparse
import json

from rocketstore.cli._common import CommandError, add_store_options, fmt_ts, open_store, table


def _list(args: argparse.Namespace) -> int:
    from rocketstore.broker.dlq import DeadLetterQueue
    with open_store(args) as store:
        letters = DeadLetterQueue(store, args.group).list()
    if args.json:
        for dl in letters:
            print(json.dumps(dl.to_json(), ensure_ascii=False))
        return 0
    if not letters:
        # nothing dead is good news, not an error
        print(f"no dead letters for group {args.group} in {args.store}")
        return 0
    table([(dl.msg_id, dl.topic, dl.origin_message_id, dl.reconsume_times,
            fmt_ts(dl.store_timestamp), " ".join(dl.keys), dl.tags, dl.resent_as or "")
           for dl in letters],
          ("msg id", "topic", "origin message id", "reconsumes", "stored", "keys", "tags",
           "resent as"))
    return 0


def _resend(args: argparse.Namespace) -> int:
    from rocketstore.broker.dlq import DeadLetterQueue
    from rocketstore.errors import StoreLockedError
    if bool(args.msg_id) == bool(args.all):
        raise CommandError("give --msg-id ID ... or --all")
    try:
        store = open_store(args, read_only=False)
    except StoreLockedError as e:
        raise CommandError(f"{e}: a running broker holds the store; stop it, or resend in the "
                           "broker's process with rocketstore.broker.dlq.DeadLetterQueue("
                           "broker, group).resend()") from None
    with store:
        results = DeadLetterQueue(store, args.group).resend(None if args.all else args.msg_id)
    rows = [(r.dead_letter.msg_id, r.outcome, r.topic, r.queue_id if r.queue_id >= 0 else None,
             r.resent_as) for r in results]
    headers = ("msg id", "outcome", "topic", "queue", "resent as")
    if args.json:
        for r in rows:
            print(json.dumps(dict(zip((h.replace(" ", "_") for h in headers), r))))
    else:
        table(rows, headers)
    return 0


def register(sub) -> None:
    p = sub.add_parser("dlq", help="list or resend a consumer group's dead letters")
    dsub = p.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    s = dsub.add_parser("list", help="dead letters with their origin")
    add_store_options(s)
    s.add_argument("--group", required=True, help="consumer group (reads %%DLQ%%GROUP)")
    s.add_argument("--json", action="store_true", help="one JSON object per line")
    s.set_defaults(func=_list)

    r = dsub.add_parser("resend", help="send dead letters back to their original topic "
                                       "(once each; the broker must not be running)")
    add_store_options(r)
    r.add_argument("--group", required=True, help="consumer group (resends from %%DLQ%%GROUP)")
    r.add_argument("--msg-id", nargs="+", metavar="ID",
                   help="dead letters to resend: message id (UNIQ_KEY) or offset message id")
    r.add_argument("--all", action="store_true", help="every dead letter not resent yet")
    r.add_argument("--json", action="store_true", help="one JSON object per line")
    r.set_defaults(func=_resend)
