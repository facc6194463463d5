from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embodied_r_ros.core.actions import ACTIONS, Motion
from embodied_r_ros.core.backends.base import ChatBackend, Conversation
from embodied_r_ros.core.cache import JsonCache
from embodied_r_ros.core.colors import describe_colour_regions
from embodied_r_ros.core.config import PerceptionConfig
from embodied_r_ros.core.perception import (
    FIRST_FRAME_PROMPT,
    PAIR_PROMPT,
    FrameDescription,
    Perceiver,
    PerceptionCancelled,
    assemble,
    parse_reply,
)
from embodied_r_ros.core.reasoning import format_question

QUESTION = format_question("Where is the red box?", ["A. left", "B. right"])


class ScriptedVLM(ChatBackend):
    """A VLM that answers from a script and records what it was shown."""

    model_id = "scripted-vlm"
    supports_images = True

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.seen: list[Conversation] = []

    def generate(self, conversations, *, max_new_tokens=None, temperature=None):  # noqa: ANN001
        out = []
        for conv in conversations:
            out.append(self.replies[len(self.seen) % len(self.replies)])
            self.seen.append(conv)
        return out


def _images(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 255, (48, 64, 3), dtype=np.uint8) for _ in range(n)]


def test_prompts_carry_the_paper_instructions() -> None:
    for action in ACTIONS:
        assert action in PAIR_PROMPT
    for text in (FIRST_FRAME_PROMPT, PAIR_PROMPT):
        assert "{question}" in text and "Do not answer the question" in text
    assert "colour and shape" in FIRST_FRAME_PROMPT and "egocentric" in FIRST_FRAME_PROMPT


@pytest.mark.parametrize(
    ("reply", "action", "observation"),
    [
        ("1. rotate left\n2. A red box appears ahead.\n3. The red box.", "rotate left",
         "A red box appears ahead. The red box."),
        ("1) Move Forward.\n2) A door.\n3) none", "move forward", "A door. none"),
        ("**1.** **Action:** tilt upward\n**2.** **New spatial information:** sky\n"
         "**3.** Objects: red box", "tilt upward", "sky red box"),
        ("Sure! Here is my answer:\n1. fly in a circle\n2. trees\n3. none", "fly in a circle",
         "trees none"),
        ("(1) rotate right (2) nothing", None, None),  # one line: no item starts a line
        ("1. move left\n2. wall on the right", "move left", "wall on the right"),
        ("I moved forward and saw a car.", None, "I moved forward and saw a car."),
        ("move backward; the tree is now far.", "move backward",
         "move backward; the tree is now far."),
    ],
)
def test_parse_reply_handles_messy_numbering(
    reply: str, action: str | None, observation: str | None
) -> None:
    parsed = parse_reply(reply)
    assert parsed.action == action
    if observation is not None:
        assert parsed.observation == observation
    else:
        assert parsed.observation == " ".join(reply.split())


def test_first_frame_reply_is_all_observation() -> None:
    assert parse_reply("1. rotate left\n2. x", first=True).action is None


def test_assembly_has_the_paper_shape() -> None:
    frames = [
        FrameDescription(0.0, None, "a red box ahead"),
        FrameDescription(1.0, "rotate left", "a wall", vlm_action="rotate left"),
        FrameDescription(2.0, None, "a door"),
    ]
    text = assemble(frames, QUESTION, report_motion=False)
    lines = text.splitlines()
    assert "Frame 0: Observe: a red box ahead" in lines
    assert "Frame 1: After rotate left, Observe: a wall" in lines
    assert "Frame 2: After None, Observe: a door" in lines
    assert text.endswith(QUESTION)
    assert "the last frame is your current position" in text
    assert lines.index("<") < lines.index("Frame 0: Observe: a red box ahead") < lines.index(">")


def test_vlm_perception_is_sequential_and_pairwise(tmp_path: Path) -> None:
    imgs = _images(3)
    vlm = ScriptedVLM(["a red box ahead", "1. rotate left\n2. a wall\n3. red box"])
    perceiver = Perceiver(PerceptionConfig(backend="vlm", vlm={"model": "x"}), vlm)
    motions = [Motion(yaw_deg=31.0), Motion(forward=1.0)]
    result = perceiver.describe(imgs, [0.0, 1.0, 2.0], QUESTION, motions)
    assert len(vlm.seen) == 3
    first_parts = vlm.seen[0][0]["content"]
    assert [p["type"] for p in first_parts] == ["image", "text"]
    assert first_parts[0]["image"] is imgs[0] and QUESTION in first_parts[1]["text"]
    pair = vlm.seen[2][0]["content"]
    assert pair[0]["image"] is imgs[1] and pair[1]["image"] is imgs[2]
    f1 = result.frames[1]
    assert f1.vlm_action == "rotate left"
    assert f1.measured_motion == "rotate left, about 31 degrees"
    assert "Frame 1: After rotate left (measured: rotate left, about 31 degrees)" in result.text


def test_vlm_replies_are_cached_and_rerun_calls_no_model(tmp_path: Path) -> None:
    imgs = _images(4)
    cfg = PerceptionConfig(backend="vlm", vlm={"model": "x"})
    cache = JsonCache(tmp_path)
    vlm = ScriptedVLM(["scene", "1. move forward\n2. a\n3. b"])
    first = Perceiver(cfg, vlm, cache).describe(imgs, [0, 1, 2, 3], QUESTION)
    assert len(vlm.seen) == 4 and not first.from_cache
    again = Perceiver(cfg, vlm, cache).describe(imgs, [0, 1, 2, 3], QUESTION)
    assert len(vlm.seen) == 4 and again.from_cache and again.text == first.text
    other_q = format_question("Where is the door?", [])
    Perceiver(cfg, vlm, cache).describe(imgs, [0, 1, 2, 3], other_q)
    assert len(vlm.seen) == 8  # another question is another perception
    v2 = cfg.model_copy(update={"prompt_version": "v2"})
    Perceiver(v2, vlm, cache).describe(imgs, [0, 1, 2, 3], QUESTION)
    assert len(vlm.seen) == 12  # so is another prompt version


def test_cancel_stops_remaining_vlm_calls() -> None:
    vlm = ScriptedVLM(["x"])
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 2

    perceiver = Perceiver(PerceptionConfig(backend="vlm", vlm={"model": "x"}), vlm)
    with pytest.raises(PerceptionCancelled):
        perceiver.describe(_images(5), [0, 1, 2, 3, 4], QUESTION, cancelled=cancelled)
    assert len(vlm.seen) == 2


def test_geometric_perception_uses_motion_and_colours() -> None:
    img = np.full((120, 160, 3), 110, np.uint8)
    img[40:80, 5:40] = (230, 20, 20)  # red on the left
    perceiver = Perceiver(PerceptionConfig(backend="geometric"))
    result = perceiver.describe([img, img], [0.0, 1.0], QUESTION, [Motion(yaw_deg=-40)])
    assert result.frames[1].action == "rotate right, about 40 degrees"
    assert "red object to the left" in result.text
    assert "Frame 1: After rotate right, about 40 degrees, Observe:" in result.text


def test_colour_regions_name_hue_direction_and_size() -> None:
    img = np.full((240, 320, 3), 128, np.uint8)
    img[100:140, 260:310] = (20, 40, 230)  # blue, right
    img[60:200, 120:200] = (30, 200, 40)  # green, ahead, large
    text = describe_colour_regions(img)
    assert text.index("green") < text.index("blue")  # largest first
    assert "large green object straight ahead" in text and "blue object to the right" in text
    assert describe_colour_regions(np.full((10, 10, 3), 90, np.uint8)).startswith("no distinct")


def test_mismatched_inputs_are_rejected() -> None:
    perceiver = Perceiver(PerceptionConfig(backend="geometric"))
    with pytest.raises(ValueError, match="stamps"):
        perceiver.describe(_images(2), [0.0], QUESTION)
    with pytest.raises(ValueError, match="motions"):
        perceiver.describe(_images(2), [0.0, 1.0], QUESTION, [None, None])


def test_odometry_action_leads_and_the_vlm_action_stays_beside_it() -> None:
    imgs = _images(3)
    vlm = ScriptedVLM(["scene", "1. rotate left\n2. a wall\n3. none", "tree"])
    perceiver = Perceiver(PerceptionConfig(backend="vlm", vlm={"model": "x"}), vlm)
    motions = [Motion(forward=2.0), Motion(yaw_deg=-30.0)]
    result = perceiver.describe(
        imgs, [0.0, 1.0, 2.0], QUESTION, motions, motion_source=["odometry", "visual"]
    )
    f1, f2 = result.frames[1:]
    assert (f1.action, f1.motion_source) == ("move forward, about 2.0 m", "odometry")
    assert "Frame 1: After move forward, about 2.0 m (VLM: rotate left), Observe:" in result.text
    # no numbered VLM action for frame 2: the visual measurement stands in for it
    assert (f2.vlm_action, f2.action) == (None, "rotate right, about 30 degrees")
    assert "Frame 2: After rotate right, about 30 degrees, Observe: tree" in result.text
    with pytest.raises(ValueError, match="one source per motion"):
        perceiver.describe(imgs, [0.0, 1.0, 2.0], QUESTION, motions, motion_source=["visual"])
