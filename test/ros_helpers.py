"""Shared plumbing for the ROS tests: real rclpy contexts on loopback, isolated per module.

``require_ros()`` at the top of a ROS test module skips it where rclpy (or the built interface
package) is missing, except in CI (``CI`` set), where that is a failure: CI must run every ROS
test for real.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

LOCALHOST_ENV = {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
#: how long a test waits for a service or action server to be discovered: DDS discovery of a
#: process that is starting several nodes took over 10 s on two loaded cores, and a wait that
#: succeeds returns as soon as the server is there
DISCOVERY_SEC = 60.0


def require_ros() -> None:
    """Skip (locally) or fail (in CI) the calling test module when ROS 2 cannot be imported."""
    try:
        import rclpy  # noqa: F401

        from embodied_r_interfaces.srv import SpatialQuery  # noqa: F401
    except ImportError as exc:
        why = (f"ROS 2 is not importable ({exc}); run `make setup` "
               "(pip install -r requirements-ros.txt && python tools/setup_ros.py)")
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the ROS tests: {why}", pytrace=False)
        pytest.skip(why, allow_module_level=True)


def domain_id(module: str) -> int:
    """A DDS domain per test module and process, so parallel runs on one host do not mix; the
    suite's parallel workers (pytest-xdist ``gw0``, ``gw1``) draw from disjoint ranges, so two
    modules running at once never share a domain."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    span = 100 // workers
    low = 1 + span * (worker % workers)
    return random.Random(f"{module}:{os.getpid()}").randint(low, low + span - 1)


@contextmanager
def ros_context(module: str, args: Sequence[str] = ()) -> Iterator[Any]:
    """An initialised rclpy context on its own domain, loopback only; shut down afterwards."""
    import rclpy
    from rclpy.context import Context

    os.environ.update(LOCALHOST_ENV)
    context = Context()
    rclpy.init(args=["test", *args], context=context, domain_id=domain_id(module))
    try:
        yield context
    finally:
        rclpy.try_shutdown(context=context)


class Spinner:
    """A multi-threaded executor spinning ``nodes`` in a background thread; what ended the spin
    early (an exception out of ``spin``) is kept in ``error``."""

    def __init__(self, context: Any, nodes: Sequence[Any] = (), threads: int = 8) -> None:
        from rclpy.executors import MultiThreadedExecutor

        self.executor = MultiThreadedExecutor(num_threads=threads, context=context)
        self.nodes: list[Any] = []
        #: destroyed after the executor stops and before the nodes (action clients, ...)
        self.owned: list[Any] = []
        self.error: BaseException | None = None
        for node in nodes:
            self.add(node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            self.executor.spin()
        except ExternalShutdownException:
            pass
        except BaseException as exc:
            self.error = exc
            raise

    def add(self, node: Any) -> Any:
        self.nodes.append(node)
        self.executor.add_node(node)
        return node

    def action_client(self, kind: Any, name: str) -> Any:
        """An action client for ``name`` on a node of its own, spun from here on. rclpy's
        ``ActionClient`` registers with its node before it has made its lock, so a client
        built on a node this executor already spins can be called half built (AttributeError
        ``_lock``), which ends the spin; this node joins the executor once the client is whole.
        """
        import rclpy
        from rclpy.action import ActionClient

        node = rclpy.create_node(f"action_client_{id(self):x}_{len(self.owned)}",
                                 context=self.executor.context)
        client = ActionClient(node, kind, name)
        self.owned.append(client)
        self.add(node)
        return client

    def remove(self, node: Any) -> None:
        self.executor.remove_node(node)
        self.nodes.remove(node)
        _close(node)

    def stop(self) -> None:
        self.executor.shutdown(timeout_sec=5.0)
        self._thread.join(timeout=10.0)
        for thing in self.owned:
            thing.destroy()
        for node in reversed(self.nodes):
            _close(node)
        self.nodes.clear()


def _close(node: Any) -> None:
    close = getattr(node, "close", None)
    if callable(close):
        close()
    node.destroy_node()


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "",
               poll: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or predicate}")
        time.sleep(poll)


def result_of(future: Any, timeout: float = 30.0) -> Any:
    """Wait for an rclpy future resolved by a spinning executor."""
    done = threading.Event()
    future.add_done_callback(lambda _f: done.set())
    if not done.wait(timeout):
        raise AssertionError(f"no result within {timeout:g} s")
    return future.result()


def call(client: Any, request: Any, timeout: float = 60.0) -> Any:
    assert client.wait_for_service(timeout_sec=DISCOVERY_SEC), f"{client.srv_name} not available"
    return result_of(client.call_async(request), timeout)


def stamp(seconds: float) -> Any:
    from embodied_r_ros.nodes.conversions import sec_to_stamp

    return sec_to_stamp(seconds)


def image_msg(rgb: Any, t: float, encoding: str = "rgb8") -> Any:
    """An rgb8 ``sensor_msgs/Image`` of ``rgb`` stamped ``t`` (``encoding`` is written as is)."""
    from embodied_r_ros.nodes.conversions import rgb_to_image

    msg = rgb_to_image(rgb, t, "camera")
    msg.encoding = encoding
    return msg


def odom_msg(t: float, x: float, y: float, yaw_deg: float) -> Any:
    import math

    from nav_msgs.msg import Odometry

    msg = Odometry()
    msg.header.stamp = stamp(t)
    msg.pose.pose.position.x, msg.pose.pose.position.y = x, y
    msg.pose.pose.orientation.z = math.sin(math.radians(yaw_deg) / 2)
    msg.pose.pose.orientation.w = math.cos(math.radians(yaw_deg) / 2)
    return msg


def wait_matched(publisher: Any, subscriptions: Sequence[Any], timeout: float = 10.0) -> None:
    """Until ``publisher`` and each of ``subscriptions`` have matched each other.

    Discovery is not symmetric: a publisher may send to a subscription that has not matched it
    yet, and best effort drops that sample for good (on loaded cores, a first frame was lost).
    """
    wait_until(lambda: publisher.get_subscription_count() >= len(subscriptions)
               and all(sub.get_publisher_count() > 0 for sub in subscriptions), timeout,
               f"{publisher.topic_name} and its subscriptions to match")


def feed(publish: Callable[[Any], None], msgs: Sequence[Any], arrived: Callable[[Any], bool],
         timeout: float = 10.0) -> None:
    """Publish ``msgs`` one at a time, each once the one before has arrived (``arrived(msg)``:
    the message itself seen at the other end, e.g. its stamp in the frame store).

    Each message is sent once (call :func:`wait_matched` first): a copy sent again after a
    slow first one arrives twice, and the duplicate moves counts (a frame skipped) and would
    stand in for the next message.
    """
    for i, msg in enumerate(msgs):
        publish(msg)
        wait_until(lambda m=msg: arrived(m), timeout, f"message {i} of {len(msgs)} to arrive")


#: the all-in-one or the separate nodes with the spatial memory at ``{path}``: geometric
#: perception (describes key frames without a model) and the tiny random LM
MEMORY_CONFIG = """base: offline
cache: {{enabled: false}}
reasoning: {{model: {{model: tiny-qwen2, max_new_tokens: 8}}}}
memory: {{enabled: true, path: "{path}", embedder: "off"}}
"""


def feed_with_odometry(odom: Callable[[Any], None], image: Callable[[Any], None], store: Any,
                       frames: Sequence[Any], stamps: Sequence[float]) -> None:
    """Each frame after an odometry pose at its stamp (0.1 m forward and 2 degrees left a
    frame), each message once it is the frame buffer's ``store``'s latest."""
    for i, t in enumerate(stamps):
        feed(odom, [odom_msg(t, 0.1 * i, 0.0, 2.0 * i)], pose_received(store))
        feed(image, [image_msg(frames[i], t)], frame_handled(store))


def frame_handled(store: Any) -> Callable[[Any], bool]:
    """``arrived`` of :func:`feed` for camera frames: the frame buffer is done with the frame
    (stored, skipped or dropped), by its stamp."""
    from embodied_r_ros.nodes.conversions import stamp_to_sec

    return lambda msg: store.stats.last_frame_stamp == stamp_to_sec(msg.header.stamp)


def pose_received(store: Any) -> Callable[[Any], bool]:
    """``arrived`` of :func:`feed` for odometry: the pose's stamp reached the frame buffer."""
    from embodied_r_ros.nodes.conversions import stamp_to_sec

    return lambda msg: store.stats.last_pose_stamp == stamp_to_sec(msg.header.stamp)


class ChatGate:
    """An OpenAI-compatible server on loopback whose requests wait at a gate.

    Wraps the real ``OpenAIServer`` (``embodied_r_ros.serving``) with a request hook: each chat
    request is counted, then blocks until :meth:`open` (or forever while closed), which makes
    "queries in flight", cancel and timeout tests deterministic.
    """

    def __init__(self, backend: Any, *, open_: bool = True) -> None:
        from embodied_r_ros.serving import serve

        self.requests = 0
        self._cond = threading.Condition()
        self._open = threading.Event()
        if open_:
            self._open.set()
        self.server = serve(backend, request_hook=self._hook)

    def _hook(self, method: str, path: str, _headers: Any) -> None:
        if method != "POST":
            return
        with self._cond:
            self.requests += 1
            self._cond.notify_all()
        self._open.wait()

    def wait_requests(self, n: int, timeout: float = 30.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.requests >= n, timeout), (
                f"{self.requests} of {n} requests arrived"
            )

    def open(self) -> None:
        self._open.set()

    def hold(self) -> None:
        """Make the next requests wait again."""
        self._open.clear()

    def close(self) -> None:
        self._open.set()
        self.server.shutdown()

    @property
    def url(self) -> str:
        return str(self.server.url)


def write_config(path: Any, text: str) -> str:
    path.write_text(text)
    return str(path)


class AllInOne:
    """The all-in-one nodes under ``namespace`` plus a tester node, spinning in the background
    (camera stamp filter off: tests feed single frames with made-up stamps).

    ``image``/``compressed`` publish to the camera topics, ``ask`` calls the service.
    """

    def __init__(self, ctx: Any, namespace: str = "/embodied_r", threads: int = 12,
                 parameters: Sequence[Any] = ()) -> None:
        import rclpy
        from rclpy.action import ActionClient
        from rclpy.parameter import Parameter
        from sensor_msgs.msg import CompressedImage, Image

        from embodied_r_interfaces.action import SpatialQuery as QueryAction
        from embodied_r_interfaces.srv import SpatialQuery
        from embodied_r_ros.nodes.allinone import build_nodes
        from embodied_r_ros.nodes.runtime import start_nodes

        self.ns = namespace
        # frames are fed one at a time with made-up stamps, each awaited: no stamp filter
        # (tested on its own in test_ros_ingest.py)
        unfiltered = [Parameter("stamp_filter", value=False), *parameters]
        self.nodes = start_nodes(build_nodes(ctx, namespace, unfiltered))
        self.by_name = {n.get_name(): n for n in self.nodes}
        self.tester = rclpy.create_node("tester", namespace=namespace, context=ctx)
        t = self.tester
        self.image = t.create_publisher(Image, f"{namespace}/image", 10)
        self.compressed = t.create_publisher(CompressedImage, f"{namespace}/image/compressed", 10)
        from embodied_r_ros.nodes.transport import QUERY_QOS

        self.query = t.create_client(SpatialQuery, f"{namespace}/query", qos_profile=QUERY_QOS)
        # built before the tester spins (see Spinner.action_client)
        self.action = ActionClient(t, QueryAction, f"{namespace}/query")
        self.spinner = Spinner(ctx, [*self.nodes, self.tester], threads=threads)
        self.spinner.owned.append(self.action)
        self._request = SpatialQuery.Request
        raw, compressed = self.by_name["frame_buffer"].camera_subscriptions
        wait_matched(self.image, [raw])
        wait_matched(self.compressed, [compressed])

    @property
    def store(self) -> Any:
        return self.by_name["frame_buffer"].store

    @property
    def runner(self) -> Any:
        return self.by_name["query_server"].runner

    def request(self, question: str = "Which way did I turn?", options: Sequence[str] = (),
                window_sec: float = 0.0, camera: str = "") -> Any:
        return self._request(question=question, options=list(options), window_sec=window_sec,
                             camera=camera)

    def ask(self, *args: Any, **kwargs: Any) -> Any:
        return call(self.query, self.request(*args, **kwargs))

    def feed_frames(self, frames: Sequence[Any], stamps: Sequence[float]) -> None:
        """Publish camera frames one at a time; returns once the last one is handled."""
        feed(self.image.publish, [image_msg(f, t) for f, t in zip(frames, stamps, strict=True)],
             frame_handled(self.store))

    def stop(self) -> None:
        self.spinner.stop()


class AllInOneProcess:
    """``python -m embodied_r_ros`` with ``config`` and ``profile`` in the test module's
    domain (``domain_id(module)``), reliable image subscriptions, stopped with SIGINT."""

    def __init__(self, config: Path, module: str, profile: str = "offline") -> None:
        env = {**os.environ, **LOCALHOST_ENV, "ROS_DOMAIN_ID": str(domain_id(module)),
               "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "embodied_r_ros", "--ros-args", "-p", f"profile:={profile}",
             "-p", f"config_file:={config}", "-p", "image_qos:=reliable"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(self) -> str:
        """Its output, after SIGINT (killed if it does not end within a minute)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            out, _ = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return out


class BagRobot:
    """Plays a bag's ``topics`` into the all-in-one under ``/embodied_r`` (each ``/x/y`` as
    ``/embodied_r/<last part>``: ``/camera/image_raw`` as ``image``) and asks it, from this
    process; counts the key frames the frame buffer publishes."""

    def __init__(self, ctx: Any, bag: Path, topics: Sequence[str], rate: float = 4.0) -> None:
        import rclpy
        from sensor_msgs.msg import Image

        from embodied_r_interfaces.srv import MemoryStats, SpatialQuery
        from embodied_r_ros.nodes.conversions import stamp_to_sec
        from embodied_r_ros.nodes.transport import QUERY_QOS
        from embodied_r_ros.ros_player import BagPlayer

        self.node = rclpy.create_node("memory_tester", context=ctx)
        self.keys: list[float] = []
        self.node.create_subscription(Image, "/embodied_r/frame_buffer/key_frames",
                                      lambda m: self.keys.append(stamp_to_sec(m.header.stamp)),
                                      10)
        self.query = self.node.create_client(SpatialQuery, "/embodied_r/query",
                                             qos_profile=QUERY_QOS)
        self.stats = self.node.create_client(MemoryStats, "/embodied_r/memory/stats")
        self._stats_request = MemoryStats.Request
        self.remap = {t: "/embodied_r/" + ("image" if t.endswith("image_raw")
                                           else t.rsplit("/", 1)[-1]) for t in topics}
        self.player = BagPlayer(self.node, bag, topics=list(topics), remap=self.remap, rate=rate)
        self.spinner = Spinner(ctx, [self.node])

    def play_into(self, process: AllInOneProcess, until: float | None) -> None:
        """Play to ``until`` into a started process, then wait until the memory stored
        every key frame the frame buffer published."""
        assert self.query.wait_for_service(timeout_sec=180), process.stop()[-3000:]
        for topic in self.remap.values():
            assert self.player.wait_for_subscribers(topic, 30), topic
        seen = len(self.keys)
        self.player.play(until)
        assert self.player.flush(10)
        try:
            wait_until(lambda: len(self.keys) > seen, 60, "key frames")
            wait_until(lambda: self.memory().recorded == len(self.keys) - seen, 60,
                       "every key frame in the memory")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the process said: {process.stop()[-3000:]}") from None

    def memory(self) -> Any:
        r = call(self.stats, self._stats_request())
        assert r.success, r.error
        return r

    def stop(self) -> None:
        self.spinner.stop()
        self.player.close()
