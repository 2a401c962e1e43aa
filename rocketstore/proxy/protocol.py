"""RocketMQ 5's gRPC messaging API (package ``apache.rocketmq.v2``) declared as data.

The message layouts below are facts of the wire format (names, field numbers, types), written
out here and turned into a ``FileDescriptorProto`` at import; ``message_factory`` then gives
the message classes. No generated modules, no build step, no upstream ``.proto`` files. The
descriptors live in a private pool under the file name ``rocketstore/proxy/messaging_v2.proto``
so they never clash with another copy of the same package in the default pool.

Only what the proxy serves is declared (the pull family and lite topics are UNIMPLEMENTED).
Field lines read ``name number type [rep|opt] [oneof=NAME]``: ``rep`` is repeated, ``opt`` a
proto3 ``optional`` (explicit presence), a type starting with an upper-case letter is a message
or enum of this package (``Duration``/``Timestamp`` are Google's well-known types).
"""
from __future__ import annotations

from typing import Any

from google.protobuf import (descriptor_pb2, descriptor_pool,  # type: ignore[import-untyped]
                            duration_pb2, message_factory, timestamp_pb2)

PACKAGE = "apache.rocketmq.v2"
SERVICE = f"{PACKAGE}.MessagingService"
FILE_NAME = "rocketstore/proxy/messaging_v2.proto"

ENUMS: dict[str, str] = {
    "TransactionResolution": "TRANSACTION_RESOLUTION_UNSPECIFIED=0 COMMIT=1 ROLLBACK=2",
    "TransactionSource": "SOURCE_UNSPECIFIED=0 SOURCE_CLIENT=1 SOURCE_SERVER_CHECK=2",
    "Permission": "PERMISSION_UNSPECIFIED=0 NONE=1 READ=2 WRITE=3 READ_WRITE=4",
    "FilterType": "FILTER_TYPE_UNSPECIFIED=0 TAG=1 SQL=2",
    "AddressScheme": "ADDRESS_SCHEME_UNSPECIFIED=0 IPv4=1 IPv6=2 DOMAIN_NAME=3",
    "MessageType": "MESSAGE_TYPE_UNSPECIFIED=0 NORMAL=1 FIFO=2 DELAY=3 TRANSACTION=4 LITE=5 "
                   "PRIORITY=6",
    "DigestType": "DIGEST_TYPE_UNSPECIFIED=0 CRC32=1 MD5=2 SHA1=3",
    "ClientType": "CLIENT_TYPE_UNSPECIFIED=0 PRODUCER=1 PUSH_CONSUMER=2 SIMPLE_CONSUMER=3 "
                  "PULL_CONSUMER=4 LITE_PUSH_CONSUMER=5 LITE_SIMPLE_CONSUMER=6",
    "Encoding": "ENCODING_UNSPECIFIED=0 IDENTITY=1 GZIP=2",
    "Code": "CODE_UNSPECIFIED=0 OK=20000 MULTIPLE_RESULTS=30000 BAD_REQUEST=40000 "
            "ILLEGAL_ACCESS_POINT=40001 ILLEGAL_TOPIC=40002 ILLEGAL_CONSUMER_GROUP=40003 "
            "ILLEGAL_MESSAGE_TAG=40004 ILLEGAL_MESSAGE_KEY=40005 ILLEGAL_MESSAGE_GROUP=40006 "
            "ILLEGAL_MESSAGE_PROPERTY_KEY=40007 INVALID_TRANSACTION_ID=40008 "
            "ILLEGAL_MESSAGE_ID=40009 ILLEGAL_FILTER_EXPRESSION=40010 "
            "ILLEGAL_INVISIBLE_TIME=40011 ILLEGAL_DELIVERY_TIME=40012 "
            "INVALID_RECEIPT_HANDLE=40013 MESSAGE_PROPERTY_CONFLICT_WITH_TYPE=40014 "
            "UNRECOGNIZED_CLIENT_TYPE=40015 MESSAGE_CORRUPTED=40016 CLIENT_ID_REQUIRED=40017 "
            "ILLEGAL_POLLING_TIME=40018 ILLEGAL_OFFSET=40019 ILLEGAL_LITE_TOPIC=40020 "
            "UNAUTHORIZED=40100 PAYMENT_REQUIRED=40200 FORBIDDEN=40300 NOT_FOUND=40400 "
            "MESSAGE_NOT_FOUND=40401 TOPIC_NOT_FOUND=40402 CONSUMER_GROUP_NOT_FOUND=40403 "
            "OFFSET_NOT_FOUND=40404 REQUEST_TIMEOUT=40800 PAYLOAD_TOO_LARGE=41300 "
            "MESSAGE_BODY_TOO_LARGE=41301 MESSAGE_BODY_EMPTY=41302 PRECONDITION_FAILED=42800 "
            "TOO_MANY_REQUESTS=42900 LITE_TOPIC_QUOTA_EXCEEDED=42901 "
            "LITE_SUBSCRIPTION_QUOTA_EXCEEDED=42902 REQUEST_HEADER_FIELDS_TOO_LARGE=43100 "
            "MESSAGE_PROPERTIES_TOO_LARGE=43101 INTERNAL_ERROR=50000 "
            "INTERNAL_SERVER_ERROR=50001 HA_NOT_AVAILABLE=50002 NOT_IMPLEMENTED=50100 "
            "PROXY_TIMEOUT=50400 MASTER_PERSISTENCE_TIMEOUT=50401 "
            "SLAVE_PERSISTENCE_TIMEOUT=50402 UNSUPPORTED=50500 VERSION_UNSUPPORTED=50501 "
            "VERIFY_FIFO_MESSAGE_UNSUPPORTED=50502 FAILED_TO_CONSUME_MESSAGE=60000",
    "Language": "LANGUAGE_UNSPECIFIED=0 JAVA=1 CPP=2 DOT_NET=3 GOLANG=4 RUST=5 PYTHON=6 PHP=7 "
                "NODE_JS=8 RUBY=9 OBJECTIVE_C=10 DART=11 KOTLIN=12",
}

MESSAGES: dict[str, str] = {
    # -- shared definitions
    "FilterExpression": "type 1 FilterType; expression 2 string",
    "RetryPolicy": "max_attempts 1 int32; exponential_backoff 2 ExponentialBackoff oneof=strategy;"
                   " customized_backoff 3 CustomizedBackoff oneof=strategy",
    "ExponentialBackoff": "initial 1 Duration; max 2 Duration; multiplier 3 float",
    "CustomizedBackoff": "next 1 Duration rep",
    "Resource": "resource_namespace 1 string; name 2 string",
    "SubscriptionEntry": "topic 1 Resource; expression 2 FilterExpression",
    "Address": "host 1 string; port 2 int32",
    "Endpoints": "scheme 1 AddressScheme; addresses 2 Address rep",
    "Broker": "name 1 string; id 2 int32; endpoints 3 Endpoints",
    "MessageQueue": "topic 1 Resource; id 2 int32; permission 3 Permission; broker 4 Broker; "
                    "accept_message_types 5 MessageType rep",
    "Digest": "type 1 DigestType; checksum 2 string",
    "SystemProperties": "tag 1 string opt; keys 2 string rep; message_id 3 string; "
                        "body_digest 4 Digest; body_encoding 5 Encoding; message_type 6 MessageType;"
                        " born_timestamp 7 Timestamp; born_host 8 string; "
                        "store_timestamp 9 Timestamp opt; store_host 10 string; "
                        "delivery_timestamp 11 Timestamp opt; receipt_handle 12 string opt; "
                        "queue_id 13 int32; queue_offset 14 int64 opt; "
                        "invisible_duration 15 Duration opt; delivery_attempt 16 int32 opt; "
                        "message_group 17 string opt; trace_context 18 string opt; "
                        "orphaned_transaction_recovery_duration 19 Duration opt; "
                        "dead_letter_queue 20 DeadLetterQueue opt; lite_topic 21 string opt; "
                        "priority 22 int32 opt",
    "DeadLetterQueue": "topic 1 string; message_id 2 string",
    "Message": "topic 1 Resource; user_properties 2 map; system_properties 3 SystemProperties; "
               "body 4 bytes",
    "Assignment": "message_queue 1 MessageQueue",
    "Status": "code 1 Code; message 2 string",
    "UA": "language 1 Language; version 2 string; platform 3 string; hostname 4 string",
    "Settings": "client_type 1 ClientType opt; access_point 2 Endpoints opt; "
                "backoff_policy 3 RetryPolicy opt; request_timeout 4 Duration opt; "
                "publishing 5 Publishing oneof=pub_sub; subscription 6 Subscription oneof=pub_sub;"
                " user_agent 7 UA; metric 8 Metric",
    "Publishing": "topics 1 Resource rep; max_body_size 2 int32; validate_message_type 3 bool",
    "Subscription": "group 1 Resource opt; subscriptions 2 SubscriptionEntry rep; fifo 3 bool opt;"
                    " receive_batch_size 4 int32 opt; long_polling_timeout 5 Duration opt; "
                    "lite_subscription_quota 6 int32 opt; max_lite_topic_size 7 int32 opt",
    "Metric": "on 1 bool; endpoints 2 Endpoints opt",
    # -- requests and responses
    "QueryRouteRequest": "topic 1 Resource; endpoints 2 Endpoints",
    "QueryRouteResponse": "status 1 Status; message_queues 2 MessageQueue rep",
    "SendMessageRequest": "messages 1 Message rep",
    "SendResultEntry": "status 1 Status; message_id 2 string; transaction_id 3 string; "
                       "offset 4 int64; recall_handle 5 string",
    "SendMessageResponse": "status 1 Status; entries 2 SendResultEntry rep",
    "QueryAssignmentRequest": "topic 1 Resource; group 2 Resource; endpoints 3 Endpoints",
    "QueryAssignmentResponse": "status 1 Status; assignments 2 Assignment rep",
    "ReceiveMessageRequest": "group 1 Resource; message_queue 2 MessageQueue; "
                             "filter_expression 3 FilterExpression; batch_size 4 int32; "
                             "invisible_duration 5 Duration opt; auto_renew 6 bool; "
                             "long_polling_timeout 7 Duration opt; attempt_id 8 string opt",
    "ReceiveMessageResponse": "status 1 Status oneof=content; message 2 Message oneof=content; "
                              "delivery_timestamp 3 Timestamp oneof=content",
    "AckMessageEntry": "message_id 1 string; receipt_handle 2 string; lite_topic 3 string opt",
    "AckMessageRequest": "group 1 Resource; topic 2 Resource; entries 3 AckMessageEntry rep",
    "AckMessageResultEntry": "message_id 1 string; receipt_handle 2 string; status 3 Status",
    "AckMessageResponse": "status 1 Status; entries 2 AckMessageResultEntry rep",
    "ForwardMessageToDeadLetterQueueRequest": "group 1 Resource; topic 2 Resource; "
                                              "receipt_handle 3 string; message_id 4 string; "
                                              "delivery_attempt 5 int32; "
                                              "max_delivery_attempts 6 int32; "
                                              "lite_topic 7 string opt",
    "ForwardMessageToDeadLetterQueueResponse": "status 1 Status",
    "HeartbeatRequest": "group 1 Resource opt; client_type 2 ClientType",
    "HeartbeatResponse": "status 1 Status",
    "EndTransactionRequest": "topic 1 Resource; message_id 2 string; transaction_id 3 string; "
                             "resolution 4 TransactionResolution; source 5 TransactionSource; "
                             "trace_context 6 string",
    "EndTransactionResponse": "status 1 Status",
    "PrintThreadStackTraceCommand": "nonce 1 string",
    "ReconnectEndpointsCommand": "nonce 1 string",
    "ThreadStackTrace": "nonce 1 string; thread_stack_trace 2 string opt",
    "VerifyMessageCommand": "nonce 1 string; message 2 Message",
    "VerifyMessageResult": "nonce 1 string",
    "RecoverOrphanedTransactionCommand": "message 1 Message; transaction_id 2 string",
    "NotifyUnsubscribeLiteCommand": "lite_topic 1 string",
    "TelemetryCommand": "status 1 Status opt; settings 2 Settings oneof=command; "
                        "thread_stack_trace 3 ThreadStackTrace oneof=command; "
                        "verify_message_result 4 VerifyMessageResult oneof=command; "
                        "recover_orphaned_transaction_command 5 RecoverOrphanedTransactionCommand "
                        "oneof=command; print_thread_stack_trace_command 6 "
                        "PrintThreadStackTraceCommand oneof=command; verify_message_command 7 "
                        "VerifyMessageCommand oneof=command; reconnect_endpoints_command 8 "
                        "ReconnectEndpointsCommand oneof=command; notify_unsubscribe_lite_command 9"
                        " NotifyUnsubscribeLiteCommand oneof=command",
    "NotifyClientTerminationRequest": "group 1 Resource opt",
    "NotifyClientTerminationResponse": "status 1 Status",
    "ChangeInvisibleDurationRequest": "group 1 Resource; topic 2 Resource; receipt_handle 3 string;"
                                      " invisible_duration 4 Duration; message_id 5 string; "
                                      "lite_topic 6 string opt; suspend 7 bool opt",
    "ChangeInvisibleDurationResponse": "status 1 Status; receipt_handle 2 string",
    "RecallMessageRequest": "topic 1 Resource; recall_handle 2 string",
    "RecallMessageResponse": "status 1 Status; message_id 2 string",
}

# RPC name -> (request, response, client streaming, server streaming)
RPCS: dict[str, tuple[str, str, bool, bool]] = {
    "QueryRoute": ("QueryRouteRequest", "QueryRouteResponse", False, False),
    "Heartbeat": ("HeartbeatRequest", "HeartbeatResponse", False, False),
    "SendMessage": ("SendMessageRequest", "SendMessageResponse", False, False),
    "QueryAssignment": ("QueryAssignmentRequest", "QueryAssignmentResponse", False, False),
    "ReceiveMessage": ("ReceiveMessageRequest", "ReceiveMessageResponse", False, True),
    "AckMessage": ("AckMessageRequest", "AckMessageResponse", False, False),
    "ForwardMessageToDeadLetterQueue": ("ForwardMessageToDeadLetterQueueRequest",
                                        "ForwardMessageToDeadLetterQueueResponse", False, False),
    "EndTransaction": ("EndTransactionRequest", "EndTransactionResponse", False, False),
    "Telemetry": ("TelemetryCommand", "TelemetryCommand", True, True),
    "NotifyClientTermination": ("NotifyClientTerminationRequest",
                                "NotifyClientTerminationResponse", False, False),
    "ChangeInvisibleDuration": ("ChangeInvisibleDurationRequest",
                                "ChangeInvisibleDurationResponse", False, False),
    "RecallMessage": ("RecallMessageRequest", "RecallMessageResponse", False, False),
}

_FD = descriptor_pb2.FieldDescriptorProto
_SCALARS = {"string": _FD.TYPE_STRING, "bytes": _FD.TYPE_BYTES, "bool": _FD.TYPE_BOOL,
            "int32": _FD.TYPE_INT32, "int64": _FD.TYPE_INT64, "float": _FD.TYPE_FLOAT}
_WELL_KNOWN = {"Duration": ".google.protobuf.Duration", "Timestamp": ".google.protobuf.Timestamp"}


def _add_field(msg: descriptor_pb2.DescriptorProto, spec: str) -> None:
    parts = spec.split()
    name, number, type_ = parts[0], int(parts[1]), parts[2]
    flags = parts[3:]
    f = msg.field.add(name=name, number=number, json_name=_camel(name))
    f.label = _FD.LABEL_REPEATED if "rep" in flags else _FD.LABEL_OPTIONAL
    if type_ == "map":                       # map<string, string>: a nested entry message
        entry = msg.nested_type.add(name=_camel(name, upper=True) + "Entry")
        entry.options.map_entry = True
        for i, key in enumerate(("key", "value"), 1):
            entry.field.add(name=key, number=i, json_name=key, type=_FD.TYPE_STRING,
                            label=_FD.LABEL_OPTIONAL)
        f.label = _FD.LABEL_REPEATED
        f.type = _FD.TYPE_MESSAGE
        f.type_name = f".{PACKAGE}.{msg.name}.{entry.name}"
    elif type_ in _SCALARS:
        f.type = _SCALARS[type_]
    elif type_ in _WELL_KNOWN:
        f.type, f.type_name = _FD.TYPE_MESSAGE, _WELL_KNOWN[type_]
    elif type_ in ENUMS:
        f.type, f.type_name = _FD.TYPE_ENUM, f".{PACKAGE}.{type_}"
    elif type_ in MESSAGES:
        f.type, f.type_name = _FD.TYPE_MESSAGE, f".{PACKAGE}.{type_}"
    else:
        raise ValueError(f"{msg.name}.{name}: unknown type {type_!r}")
    for flag in flags:
        if flag.startswith("oneof="):
            f.oneof_index = _oneof(msg, flag[6:])
    if "opt" in flags:                        # proto3 optional = a synthetic one-field oneof
        f.proto3_optional = True
        f.oneof_index = _oneof(msg, "_" + name)


def _oneof(msg: descriptor_pb2.DescriptorProto, name: str) -> int:
    for i, o in enumerate(msg.oneof_decl):
        if o.name == name:
            return i
    msg.oneof_decl.add(name=name)
    return len(msg.oneof_decl) - 1


def _camel(name: str, upper: bool = False) -> str:
    head, *rest = name.split("_")
    out = head + "".join(p.title() for p in rest)
    return out[:1].upper() + out[1:] if upper else out


def file_descriptor_proto() -> descriptor_pb2.FileDescriptorProto:
    """The API as a ``FileDescriptorProto`` (proto3), built from the tables above."""
    fdp = descriptor_pb2.FileDescriptorProto(name=FILE_NAME, package=PACKAGE, syntax="proto3")
    fdp.dependency.extend(["google/protobuf/duration.proto", "google/protobuf/timestamp.proto"])
    for name, values in ENUMS.items():
        e = fdp.enum_type.add(name=name)
        for item in values.split():
            vname, num = item.split("=")
            e.value.add(name=vname, number=int(num))
    for name, fields in MESSAGES.items():
        m = fdp.message_type.add(name=name)
        specs = [s.strip() for s in fields.split(";")]
        # the real oneofs first: protobuf wants the synthetic (optional) ones after them
        for spec in specs:
            for flag in spec.split()[3:]:
                if flag.startswith("oneof="):
                    _oneof(m, flag[6:])
        for spec in specs:
            _add_field(m, spec)
    svc = fdp.service.add(name="MessagingService")
    for rpc, (req, resp, cs, ss) in RPCS.items():
        svc.method.add(name=rpc, input_type=f".{PACKAGE}.{req}", output_type=f".{PACKAGE}.{resp}",
                       client_streaming=cs, server_streaming=ss)
    return fdp


def _build() -> tuple[descriptor_pool.DescriptorPool, dict[str, Any]]:
    pool = descriptor_pool.DescriptorPool()
    for wkt in (duration_pb2, timestamp_pb2):
        pool.AddSerializedFile(wkt.DESCRIPTOR.serialized_pb)
    fd = pool.AddSerializedFile(file_descriptor_proto().SerializeToString())
    classes = {name: message_factory.GetMessageClass(desc)
               for name, desc in fd.message_types_by_name.items()}
    for wkt in ("Duration", "Timestamp"):
        classes[wkt] = message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"google.protobuf.{wkt}"))
    return pool, classes


POOL, CLASSES = _build()
FILE = POOL.FindFileByName(FILE_NAME)


def enum_value(enum: str, name: str) -> int:
    """The number of ``enum``'s value ``name`` (``enum_value("Code", "OK")`` = 20000)."""
    return FILE.enum_types_by_name[enum].values_by_name[name].number


def enum_name(enum: str, number: int) -> str:
    v = FILE.enum_types_by_name[enum].values_by_number.get(number)
    return v.name if v is not None else str(number)


def __getattr__(name: str) -> Any:
    """``protocol.SendMessageRequest`` etc.: the message classes by name."""
    try:
        return CLASSES[name]
    except KeyError:
        raise AttributeError(name) from None
