"""The actor <-> learner link over ROS 2 topics: an ``Endpoint`` (see runtime/transport.py)
whose frames are ``std_msgs/UInt8MultiArray`` messages carrying ``wire`` bytes (safetensors +
JSON, never pickle). The learner and actors never know which transport they use.

    learner/transitions  actors -> learner   reliable, bounded queue (several actors, one topic)
    learner/weights      learner -> actors   reliable, transient local: a late actor gets the newest
    learner/events       learner -> actors   status, checkpoint_saved, error
"""

from __future__ import annotations

import logging

from robot_rl.drivers import messages as msgs
from robot_rl.drivers import topics
from robot_rl.runtime.transport import Endpoint, Mailbox
from robot_rl.runtime.wire import Message, encode, read_kind

log = logging.getLogger(__name__)


class RosEndpoint(Endpoint):
    def __init__(self, node, routes: dict[str, str], default_topic: str, subscribe: list[str],
                 maxsize: int = 4096, latest_only=("weights", "status")):
        """``routes``: message kind -> topic (others go to ``default_topic``); ``subscribe``:
        topics whose frames this side receives."""
        from std_msgs.msg import UInt8MultiArray

        super().__init__(latest_only)
        self._inbox = Mailbox(maxsize, latest_only)
        self._routes, self._default = dict(routes), default_topic
        self._pubs = {}
        for topic in {*routes.values(), default_topic}:
            self._pubs[topic] = node.create_publisher(UInt8MultiArray, topic, qos_for(topic))
        for topic in subscribe:
            node.create_subscription(UInt8MultiArray, topic, self._on_frame, qos_for(topic))
        self._closed = False
        self._warned_publish = False

    def _on_frame(self, msg) -> None:
        data = msgs.payload_bytes(msg)
        try:
            kind = read_kind(data)  # the header alone: the frame is decoded once, when received
        except ValueError as e:
            return self._count_corrupt(e)
        if not self._inbox.put(kind, data):
            self._count_drop()

    def send(self, kind, arrays=None, meta=None) -> bool:
        data = encode(kind, arrays, meta)
        if self._closed:
            return self._count_drop()
        try:
            self._pubs[self._routes.get(kind, self._default)].publish(msgs.payload_msg(data))
        except Exception as e:  # DDS out of resources under a flood, or shutting down: drop, never crash
            if not self._warned_publish:
                self._warned_publish = True
                log.warning("dropping %s message: %s", kind, e)
            return self._count_drop()
        return True

    def receive(self, timeout: float | None = 0.0) -> list[Message]:
        return self._decode_all(self._inbox.get_all(timeout))

    def close(self) -> None:
        self._closed = True
        self._inbox.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def peer_closed(self) -> bool:
        return False  # peers come and go on a ROS graph; a restarted learner is the same peer


def qos_for(topic: str):
    return topics.qos_latched() if topic == topics.WEIGHTS else topics.qos_data()


def actor_endpoint(node) -> RosEndpoint:
    return RosEndpoint(node, {}, topics.TRANSITIONS, [topics.WEIGHTS, topics.LEARNER_EVENTS])


def learner_endpoint(node) -> RosEndpoint:
    return RosEndpoint(node, {"weights": topics.WEIGHTS}, topics.LEARNER_EVENTS, [topics.TRANSITIONS],
                       maxsize=100_000, latest_only=())
