"""A small bag player (rosbag2 MCAP or SQLite, or a ROS 1 bag) for machines without
``ros2 bag play``.

The pip route has rclpy but not rosbag2's player, so the demo and the benchmarks play bags with
this: messages are read with ``rosbags`` and published as their stored CDR bytes (no
deserialisation, so a 30 Hz HD stream costs little; a ROS 1 bag's messages are converted to CDR
on the way, as ``rosbags-convert`` converts them), paced at ``rate`` times real time by the
bag's receive timestamps. A topic recorded from a latched or transient-local publisher
(``/tf_static``) is offered transient-local, so subscribers that join late still get it; so is
a ``/tf_static`` whose bag records no durability, as tf's convention has it.
Playback can run in segments (``play(until=...)``) so a caller can pause at a moment of the
recording, ask questions, and go on.

    python -m embodied_r_ros.ros_player BAG [--rate 1.0] [--topics /camera/image_raw /odom]
        [--remap /camera/image_raw:=/embodied_r/image] [--start 0] [--end 10] [--loop]
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rclpy
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from embodied_r_ros.nodes.signal_stop import await_signal_shutdown
from embodied_r_ros.nodes.transport import use_large_frame_transport
from embodied_r_ros.recordings.bags import TF_TYPE, BagError, BagReader

log = logging.getLogger(__name__)

NS = 1_000_000_000


def message_class(msgtype: str) -> Any:
    """``sensor_msgs/msg/Image`` -> the rclpy class ``sensor_msgs.msg.Image``."""
    pkg, kind, name = msgtype.split("/")
    try:
        return getattr(importlib.import_module(f"{pkg}.{kind}"), name)
    except (ImportError, AttributeError):
        raise ValueError(f"no ROS 2 message type {msgtype} here (is its package installed? "
                         "leave the topic out with --topics)") from None


def parse_remaps(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        src, sep, dst = item.partition(":=")
        if not sep or not src or not dst:
            raise ValueError(f"remap {item!r} must look like /from:=/to")
        out[src] = dst
    return out


def offered_latched(conn: Any, recorded: bool | None) -> bool:
    """Whether to offer ``conn`` transient-local: as recorded, or, where the bag records no
    durability (bags written by other tools often do not), as tf's convention has
    ``/tf_static``, so that tf listeners, which subscribe it transient-local, match at all."""
    if recorded is not None:
        return recorded
    static = conn.msgtype == TF_TYPE and conn.topic.rsplit("/", 1)[-1] == "tf_static"
    if static:
        log.info("%s: the bag records no durability; offered transient-local, as tf's "
                 "static transforms are", conn.topic)
    return static


@dataclass(frozen=True)
class BagInfo:
    start_ns: int
    end_ns: int
    topics: dict[str, str]  # topic -> msgtype
    counts: dict[str, int]

    @property
    def duration_sec(self) -> float:
        return (self.end_ns - self.start_ns) / NS


class BagPlayer:
    """Publishes a bag's messages on ``node``; iteration state persists across ``play`` calls."""

    def __init__(
        self,
        node: Node,
        bag: str | Path,
        *,
        topics: Sequence[str] | None = None,
        remap: dict[str, str] | None = None,
        rate: float = 1.0,
        qos_depth: int = 10,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self.node = node
        self.rate = rate
        self._bag = BagReader(bag).open()  # BagError: one line naming the bag
        self._reader = self._bag.reader
        conns = [c for c in self._reader.connections if topics is None or c.topic in topics]
        missing = set(topics or ()) - {c.topic for c in conns}
        if missing:
            self._bag.close()
            raise ValueError(f"topics not in the bag: {', '.join(sorted(missing))}")
        remap = remap or {}
        self._pubs: dict[int, Any] = {}
        self._cdr: dict[int, Any] = {}
        by_topic: dict[str, Any] = {}
        try:
            for conn in conns:
                name = remap.get(conn.topic, conn.topic)
                if name not in by_topic:
                    latched = offered_latched(conn, self._bag.latched(conn))
                    qos = QoSProfile(depth=qos_depth, reliability=ReliabilityPolicy.RELIABLE,
                                     durability=DurabilityPolicy.TRANSIENT_LOCAL if latched
                                     else DurabilityPolicy.VOLATILE)
                    by_topic[name] = node.create_publisher(message_class(conn.msgtype), name,
                                                           qos)
                self._pubs[conn.id] = by_topic[name]
                self._cdr[conn.id] = self._bag.cdr_converter(conn)
        except BaseException:
            self._bag.close()
            raise
        self._conns = conns
        self.info = BagInfo(
            start_ns=self._reader.start_time,
            end_ns=self._reader.end_time,
            topics={c.topic: c.msgtype for c in conns},
            counts={c.topic: c.msgcount for c in conns},
        )
        self._iter: Iterator[tuple[Any, int, bytes]] | None = None
        self._pending: tuple[Any, int, bytes] | None = None
        self.published = 0
        self.position_ns = self.info.start_ns

    def publishers(self) -> list[Any]:
        return list({id(p): p for p in self._pubs.values()}.values())

    def wait_for_subscribers(self, topic: str, timeout_sec: float) -> bool:
        """Wait until ``topic`` (after remapping) has a subscriber, so nothing is lost."""
        pubs = [p for p in self.publishers() if p.topic_name == self.node.resolve_topic_name(topic)]
        deadline = time.monotonic() + timeout_sec
        while time.monotonic() < deadline:
            if pubs and all(p.get_subscription_count() > 0 for p in pubs):
                return True
            time.sleep(0.02)
        return False

    def seek(self, sec: float = 0.0) -> None:
        """Continue from ``sec`` seconds after the bag start (0 = rewind)."""
        start = self.info.start_ns + round(sec * NS)
        self._pending = None
        self._iter = self._reader.messages(connections=self._conns, start=start)
        self.position_ns = start

    def _next(self) -> tuple[Any, int, bytes] | None:
        if self._pending is not None:
            item, self._pending = self._pending, None
            return item
        if self._iter is None:
            self._iter = self._reader.messages(connections=self._conns)
        return next(self._iter, None)

    def play(self, until_sec: float | None = None) -> int:
        """Publish from the current position up to ``until_sec`` after the bag start (None: the
        end) at ``rate`` x real time; returns the number of messages published."""
        limit = None if until_sec is None else self.info.start_ns + round(until_sec * NS)
        wall0 = time.monotonic()
        bag0: int | None = None
        n = 0
        while True:
            item = self._next()
            if item is None:
                break
            conn, stamp, raw = item
            if limit is not None and stamp > limit:
                self._pending = item
                break
            if bag0 is None:
                bag0 = stamp
            delay = (stamp - bag0) / NS / self.rate - (time.monotonic() - wall0)
            if delay > 0:
                time.sleep(delay)
            self._pubs[conn.id].publish(bytes(self._cdr[conn.id](raw)))
            self.position_ns = stamp
            n += 1
        self.published += n
        return n

    def flush(self, timeout_sec: float = 5.0) -> bool:
        """Wait until subscribers acknowledged everything published (reliable QoS), so a
        player that exits right after ``play`` loses no message still on its way."""
        from rclpy.duration import Duration

        return all(pub.wait_for_all_acked(Duration(seconds=timeout_sec))
                   for pub in self._pubs.values())

    def close(self) -> None:
        self._bag.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Play a bag (rosbag2 mcap/sqlite3, or ROS 1 "
                                     ".bag) with rclpy.")
    parser.add_argument("bag", type=Path)
    parser.add_argument("--rate", type=float, default=1.0, help="playback speed factor")
    parser.add_argument("--topics", nargs="*", help="topics to play (default: all)")
    parser.add_argument("--remap", nargs="*", default=[], help="/from:=/to topic remaps")
    parser.add_argument("--start", type=float, default=0.0, help="skip the first START seconds")
    parser.add_argument("--end", type=float, default=None, help="stop END seconds into the bag")
    parser.add_argument("--loop", action="store_true", help="play again and again")
    parser.add_argument("--wait-subscribers", type=float, default=5.0, metavar="SEC",
                        help="wait this long for a subscriber on each topic before playing")
    args = parser.parse_args(list(argv) if argv is not None else sys.argv[1:])
    logging.basicConfig(level=logging.INFO, format="ros_player: %(message)s")
    use_large_frame_transport()  # raw frames over shared memory, not lossy fragmented UDP
    rclpy.init(args=[])
    node = rclpy.create_node("embodied_r_player")
    try:
        player = BagPlayer(node, args.bag, topics=args.topics, remap=parse_remaps(args.remap),
                           rate=args.rate)
    except (ValueError, OSError, BagError) as exc:
        print(f"ros_player: error: {exc}", file=sys.stderr)
        node.destroy_node()
        rclpy.shutdown()
        return 2
    info = player.info
    log.info("%s: %.1f s, %s", args.bag, info.duration_sec,
             ", ".join(f"{t} ({n})" for t, n in info.counts.items()))
    for topic in info.topics:
        player.wait_for_subscribers(parse_remaps(args.remap).get(topic, topic),
                                    args.wait_subscribers)
    try:
        while True:
            player.seek(args.start)
            n = player.play(args.end)
            log.info("published %d messages", n)
            if not args.loop:
                break
        player.flush()
    except KeyboardInterrupt:
        await_signal_shutdown(node.context)
    finally:
        player.close()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
