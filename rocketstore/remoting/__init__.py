"""RocketMQ's remoting protocol: frames and commands (``command``), the fastjson dialect
(``fastjson``), connections that are client and server at once (``connection``), an asyncio
server and an event-loop thread (``server``) and a client (``client``)."""
from rocketstore.common.codes import LanguageCode, RequestCode
from rocketstore.remoting.command import FrameDecoder, RemotingCommand, decode_frame

__all__ = ["RemotingCommand", "FrameDecoder", "decode_frame", "RequestCode", "LanguageCode"]
