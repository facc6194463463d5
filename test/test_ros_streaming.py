"""Streaming perception on the all-in-one over real DDS: key frames are described in the
background as they arrive (published on ~/descriptions), a question then finds them ready, and a
question with nothing ready still answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from media import pan_frames
from ros_helpers import AllInOne, require_ros, ros_context, wait_until

require_ros()

from rclpy.parameter import Parameter  # noqa: E402

from embodied_r_interfaces.msg import KeyFrameDescription  # noqa: E402
from embodied_r_ros.core.chat import ChatBackend  # noqa: E402
from embodied_r_ros.nodes.conversions import stamp_to_sec  # noqa: E402

NS = "/stream"
OPTIONS = ["A. left", "B. right"]
FRAMES = pan_frames(16, 90)  # fast: a new key frame every other frame
STAMPS = [40.0 + i for i in range(len(FRAMES))]


class Counting(ChatBackend):
    """The real VLM, its calls counted."""

    def __init__(self, inner: ChatBackend) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.supports_images = inner.supports_images
        self.calls = 0

    def complete(self, conversations, **kw):  # noqa: ANN001, ANN003, ANN201
        self.calls += len(conversations)
        return self.inner.complete(conversations, **kw)


@pytest.fixture(scope="module")
def world(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    cfg = tmp_path_factory.mktemp("cfg") / "streaming.yaml"
    cfg.write_text("base: tiny\ncache: {enabled: false}\n"
                   "perception: {mode: streaming, streaming_queue: 32, vlm: {max_new_tokens: 6}}\n"
                   "reasoning: {model: {max_new_tokens: 4}}\n")
    params = [Parameter("profile", value="tiny"), Parameter("config_file", value=str(cfg))]
    with ros_context(__name__) as ctx:
        w = AllInOne(ctx, NS, parameters=params)
        w.notes: list[KeyFrameDescription] = []  # type: ignore[misc]
        w.tester.create_subscription(KeyFrameDescription, f"{NS}/perception/descriptions",
                                     w.notes.append, 50)
        perceiver = w.by_name["perception"].pipeline.perceiver
        perceiver.vlm = w.vlm = Counting(perceiver.vlm)  # type: ignore[attr-defined]
        yield w
        w.stop()


def test_descriptions_appear_as_key_frames_arrive_and_serve_questions(world: Any) -> None:
    world.feed_frames(FRAMES[:10], STAMPS[:10])
    keys = world.store.stats.keyframes
    assert keys >= 4
    wait_until(lambda: len(world.notes) == keys, 60, "a description of every key frame")
    notes = world.notes
    assert all(n.description and n.model == "tiny-qwen2.5-vl" for n in notes)
    assert stamp_to_sec(notes[0].header.stamp) == STAMPS[0] and notes[0].action == ""
    assert {n.header.frame_id for n in notes} == {"front"}  # the camera
    assert [stamp_to_sec(n.previous_stamp) for n in notes[1:]] == [
        stamp_to_sec(n.header.stamp) for n in notes[:-1]]  # each after its predecessor
    stored = world.store.stats.stored
    describer = world.by_name["perception"].describer
    wait_until(lambda: describer.described == stored, 60, "every stored frame described")
    # each key frame alone and after the one before it; every other frame after the last key
    before = world.vlm.calls
    assert before == keys + (stored - 1) and describer.dropped == 0
    r = world.ask("Which way did I turn?", OPTIONS)
    assert r.success, r.error
    stamps = [stamp_to_sec(s) for s in r.key_frame_stamps]
    assert stamps[:-1] == [stamp_to_sec(n.header.stamp) for n in notes][: len(stamps) - 1]
    assert stamps[-1] == STAMPS[9]  # the window ends with the current view
    assert world.vlm.calls == before  # every description was ready: no VLM call at query time
    other = world.ask("Is the door on the left?", OPTIONS)  # another question: still none
    assert other.success and world.vlm.calls == before
    assert r.perception.split("\n>\n")[0] == other.perception.split("\n>\n")[0]


def test_a_question_with_nothing_ready_still_answers(world: Any) -> None:
    perception = world.by_name["perception"]
    perception._stop_describer()  # the background stops: nothing new will be ready
    before = world.vlm.calls
    world.feed_frames(FRAMES[10:], STAMPS[10:])
    r = world.ask("Which way did I turn?", OPTIONS, window_sec=STAMPS[-1] - STAMPS[10])
    assert r.success, r.error
    assert world.vlm.calls > before  # described at question time instead
