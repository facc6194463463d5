from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scripted import ScriptedVLM, prompt_of

from embodied_r_ros.backends.reply_cache import ReplyCache
from embodied_r_ros.core.actions import ACTIONS, Motion
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.colors import colour_objects
from embodied_r_ros.core.config import PerceptionConfig
from embodied_r_ros.core.error_codes import CANCELLED
from embodied_r_ros.core.perception import Perceiver, parse_reply
from embodied_r_ros.core.perception_text import describe_objects, render
from embodied_r_ros.core.prompts import default_prompts
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.records import FrameRecord, PerceptionRecord, TextStyle

QUESTION = format_question("Where is the red box?", ["A. left", "B. right"])


def _images(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 255, (48, 64, 3), dtype=np.uint8) for _ in range(n)]


def test_prompts_carry_the_paper_instructions() -> None:
    p = default_prompts()
    first, pair = p.first_frame_prompt(QUESTION), p.pair_prompt(QUESTION)
    for action in ACTIONS:
        assert action in pair
    for text in (first, pair):
        assert QUESTION in text and "Do not answer the question" in text
    assert "colour and shape" in first and "egocentric" in first
    for agnostic in (p.first_frame_prompt(None), p.pair_prompt(None)):  # streaming
        assert "question" not in agnostic.lower() and "Be concise." in agnostic
    assert all(a in p.pair_prompt(None) for a in ACTIONS)


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
    frames = (
        FrameRecord(0.0, vlm_text="a red box ahead"),
        FrameRecord(1.0, vlm_action="rotate left", vlm_text="a wall"),
        FrameRecord(2.0, vlm_text="a door"),
    )
    text = render(PerceptionRecord(frames, "", (), QUESTION, TextStyle(report_motion=False)))
    lines = text.splitlines()
    assert "Frame 0: Observe: a red box ahead" in lines
    assert "Frame 1: After rotate left, Observe: a wall" in lines
    assert "Frame 2: After None, Observe: a door" in lines
    assert text.endswith(QUESTION)
    assert "the last frame is your current position" in text
    assert lines.index("<") < lines.index("Frame 0: Observe: a red box ahead") < lines.index(">")


def test_vlm_perception_is_pairwise(tmp_path: Path) -> None:
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
    assert f1.vlm_action == "rotate left" and f1.vlm_text == "a wall red box"
    assert (f1.motion, f1.motion_source) == (Motion(yaw_deg=31.0), "visual")
    assert ("Frame 1 (1 s before the last key frame): After rotate left (measured: rotate left "
            "about 31 degrees)") in result.text


def _vlm_cfg(**kw: object) -> PerceptionConfig:
    return PerceptionConfig(backend="vlm", vlm={"model": "x"}, **kw)


def test_vlm_replies_are_cached_per_call_and_rerun_calls_no_model(tmp_path: Path) -> None:
    imgs = _images(4)
    cache = ReplyCache(tmp_path)
    vlm = ScriptedVLM(["scene", "1. move forward\n2. a\n3. b"])
    first = Perceiver(_vlm_cfg(), vlm, cache).describe(imgs, [0, 1, 2, 3], QUESTION)
    assert len(vlm.seen) == 4 and not first.from_cache and first.vlm_calls == 4
    again = Perceiver(_vlm_cfg(), vlm, ReplyCache(tmp_path)).describe(imgs, [0, 1, 2, 3], QUESTION)
    assert len(vlm.seen) == 4 and again.from_cache and again.text == first.text  # from disk
    other_q = format_question("Where is the door?", [])
    Perceiver(_vlm_cfg(), vlm, cache).describe(imgs, [0, 1, 2, 3], other_q)
    assert len(vlm.seen) == 8  # another question is another perception
    base = _vlm_cfg()
    hotter = base.model_copy(update={"vlm": base.vlm.model_copy(update={"temperature": 0.7})})
    Perceiver(hotter, vlm, cache).describe(imgs, [0, 1, 2, 3], QUESTION)
    assert len(vlm.seen) == 12  # so are other generation settings


def test_a_slid_window_only_perceives_the_new_pairs() -> None:
    imgs = _images(7)
    vlm = ScriptedVLM(["scene", "1. rotate left\n2. a\n3. b"])
    perceiver = Perceiver(_vlm_cfg(), vlm, ReplyCache(None))
    perceiver.describe(imgs[:5], [0, 1, 2, 3, 4], QUESTION)
    assert len(vlm.seen) == 5
    slid = perceiver.describe(imgs[1:6], [1, 2, 3, 4, 5], QUESTION)
    # the new first frame alone, and the one new pair (4, 5): the pairs (1,2)..(3,4) are cached
    assert slid.vlm_calls == 2 and len(vlm.seen) == 7
    shown = [[p["image"] for p in c[0]["content"] if p["type"] == "image"] for c in vlm.seen[5:]]
    assert [len(x) for x in shown] == [1, 2]
    assert shown[0][0] is imgs[1] and shown[1][0] is imgs[4] and shown[1][1] is imgs[5]
    assert perceiver.describe(imgs[1:6], [1, 2, 3, 4, 5], QUESTION).vlm_calls == 0


def test_concurrent_and_sequential_perception_give_the_same_text() -> None:
    imgs = _images(6)
    replies = ["scene"] + [f"1. rotate left\n2. thing {i}\n3. box" for i in range(5)]
    seq_vlm, conc_vlm = ScriptedVLM(replies), ScriptedVLM(replies)
    seq = Perceiver(_vlm_cfg(concurrency=1), seq_vlm).describe(imgs, list(range(6)), QUESTION)
    conc = Perceiver(_vlm_cfg(), conc_vlm).describe(imgs, list(range(6)), QUESTION)
    assert seq.text == conc.text and "thing 4" in conc.text
    assert seq_vlm.batches == [1] * 6 and conc_vlm.batches == [6]  # one batch of all calls


def test_progress_reports_each_reply_as_it_arrives() -> None:
    seen: list[tuple[int, int]] = []
    vlm = ScriptedVLM(["scene", "1. move left\n2. a\n3. b"])
    Perceiver(_vlm_cfg(), vlm).describe(
        _images(3), [0, 1, 2], QUESTION, on_progress=lambda _s, d, t, _x: seen.append((d, t))
    )
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_cancel_stops_remaining_vlm_calls_and_keeps_the_replies_it_got() -> None:
    token = CancelToken()
    vlm = ScriptedVLM(["x"])

    def progress(_stage: str, done: int, _total: int, _text: str) -> None:
        if done == 2:
            token.cancel()

    perceiver = Perceiver(_vlm_cfg(), vlm, ReplyCache(None))
    with pytest.raises(BackendError) as err:
        perceiver.describe(_images(5), [0, 1, 2, 3, 4], QUESTION, on_progress=progress,
                           cancel=token)
    assert err.value.code == CANCELLED and len(vlm.seen) == 2
    again = perceiver.describe(_images(5), [0, 1, 2, 3, 4], QUESTION)
    assert again.vlm_calls == 3  # the two replies before the cancel were kept


def test_streaming_prompts_are_question_agnostic_and_shared_by_questions() -> None:
    imgs = _images(3)
    vlm = ScriptedVLM([], by_images={1: "scene", 2: "1. rotate left\n2. a"})
    perceiver = Perceiver(_vlm_cfg(mode="streaming"), vlm, ReplyCache(None))
    notes = [perceiver.prefetch(None, imgs[0])]
    notes += [perceiver.prefetch(a, b) for a, b in zip(imgs, imgs[1:], strict=False)]
    # each key frame alone and after its predecessor: 1 + 2 + 2 calls, none with the question
    assert len(vlm.seen) == 5 and all("Question" not in prompt_of(c) for c in vlm.seen)
    assert notes[0].vlm_action is None and notes[1].vlm_action == "rotate left"
    result = perceiver.describe(imgs, [0, 1, 2], QUESTION)
    other = perceiver.describe(imgs, [0, 1, 2], format_question("Where is the door?", []))
    assert result.vlm_calls == other.vlm_calls == 0 and result.text.endswith(QUESTION)
    assert "Frame 1: After rotate left, Observe: a" in result.text
    late = perceiver.describe(imgs[1:], [1, 2], QUESTION)  # a window starting at frame 1
    assert late.vlm_calls == 0


def test_geometric_perception_uses_motion_and_colours() -> None:
    img = np.full((120, 160, 3), 110, np.uint8)
    img[40:80, 5:40] = (230, 20, 20)  # red on the left
    perceiver = Perceiver(PerceptionConfig(backend="geometric"))
    result = perceiver.describe([img, img], [0.0, 1.0], QUESTION, [Motion(yaw_deg=-40)])
    assert result.frames[1].motion == Motion(yaw_deg=-40) and result.frames[1].vlm_text is None
    assert [o.name for o in result.frames[1].objects] == ["red object"]
    assert result.frames[1].objects[0].bearing_deg > 20.0
    assert "red object to the left" in result.text
    assert ("Frame 1 (0 s before the last key frame): After rotate right about 40 degrees, "
            "Observe:") in result.text


def test_colour_regions_name_hue_direction_and_size() -> None:
    img = np.full((240, 320, 3), 128, np.uint8)
    img[100:140, 260:310] = (20, 40, 230)  # blue, right
    img[60:200, 120:200] = (30, 200, 40)  # green, ahead, large
    found = colour_objects(img)
    assert [o.colour for o in found] == ["green", "blue"]  # largest first
    assert (found[0].size, found[0].direction) == ("large", "straight ahead")
    assert found[1].direction == "to the right" and found[1].bearing_deg < -20.0
    text = describe_objects(found)
    assert "large green object straight ahead" in text and "blue object to the right" in text
    assert colour_objects(np.full((10, 10, 3), 90, np.uint8)) == ()


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
    assert (f1.motion, f1.motion_source) == (Motion(forward=2.0), "odometry")
    assert ("Frame 1 (1 s before the last key frame): After move forward about 2.0 m (VLM: "
            "rotate left), Observe:") in result.text
    # no numbered VLM action for frame 2: the visual measurement stands in for it
    assert (f2.vlm_action, f2.motion_source) == (None, "visual")
    assert ("Frame 2 (0 s before the last key frame): After rotate right about 30 degrees, "
            "Observe: tree") in result.text
    with pytest.raises(ValueError, match="one source per motion"):
        perceiver.describe(imgs, [0.0, 1.0, 2.0], QUESTION, motions, motion_source=["visual"])
