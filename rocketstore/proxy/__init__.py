"""RocketMQ 5.x clients (gRPC, ``apache.rocketmq.v2.MessagingService``) served by a proxy in
front of rocketstore brokers: ``rocketstore proxy --namesrv HOST:PORT``. See docs/grpc.md.

Needs the ``grpc`` extra (grpcio, protobuf). Nothing here imports a RocketMQ client package.
"""
