"""Objects the VLM grounds: Qwen2.5-VL's resize rule against transformers' own processor, boxes
to bearings at the image's edges and centre through the intrinsics (a CameraInfo's, scaled, or
the field of view's guess), both ways of asking (``request``, ``reply``), malformed replies that
cost one frame's objects and one log line, the cache, streaming into the memory, and the real
backends: the OpenAI client against the project's server on loopback, and the tiny Qwen2.5-VL
(whose garbage replies must leave the pipeline answering, with no objects)."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scripted import GroundingVLM, ScriptedVLM

from embodied_r_ros.backends.factory import load_pipeline
from embodied_r_ros.backends.reply_cache import ReplyCache
from embodied_r_ros.core.chat import ChatBackend, ImageGrid
from embodied_r_ros.core.config import CameraConfig, ConfigError, ModelConfig, PerceptionConfig
from embodied_r_ros.core.egomotion import camera_matrix
from embodied_r_ros.core.grounding import (
    GroundingError,
    grounded_objects,
    model_image_size,
    smart_resize,
    split_boxes,
)
from embodied_r_ros.core.perception import Perceiver
from embodied_r_ros.core.perception_text import render
from embodied_r_ros.core.profiles import config_from_dict
from embodied_r_ros.core.prompts import load_prompts
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.request import Question, validate_query
from embodied_r_ros.recordings.bags import CameraInfo

QWEN25 = ImageGrid(28, 3136, 12845056)  # Qwen2.5-VL's preprocessor_config.json
QUESTION = format_question("Where is the red chair?", ["A. left", "B. right"])
LOG = "embodied_r_ros.core.perception"


def _perceiver(grounding_mode: str, vlm: ChatBackend, *, max_side: int = 640,
               cache: Any = None, **perception: Any) -> Perceiver:
    grounding = {"mode": grounding_mode, **perception.pop("grounding", {})}
    cfg = PerceptionConfig(vlm=ModelConfig(model=vlm.model_id, image_max_side=max_side),
                           grounding=grounding, **perception)
    return Perceiver(cfg, vlm, cache)


def _frames(n: int, width: int = 640, height: int = 480) -> list[np.ndarray]:
    return [np.full((height, width, 3), 40 * i, np.uint8) for i in range(n)]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOG
            and r.levelno == logging.WARNING]


# -- the resize rule and the geometry ---------------------------------------------------------


@pytest.mark.parametrize("size", [(480, 640), (48, 64), (720, 1280), (37, 1500), (2000, 3000),
                                  (50, 50), (1080, 1920)])
@pytest.mark.parametrize("bounds", [(3136, 50176), (3136, 1003520), (200_000, 400_000)])
def test_the_resize_rule_is_the_processors(size: tuple[int, int],
                                           bounds: tuple[int, int]) -> None:
    """What transformers' Qwen2-VL image processor makes of an image, patch grid and all."""
    from transformers import Qwen2VLImageProcessorPil

    processor = Qwen2VLImageProcessorPil(min_pixels=bounds[0], max_pixels=bounds[1])
    out = processor(images=[np.zeros((*size, 3), np.uint8)], return_tensors="np")
    _, grid_h, grid_w = (int(v) for v in out["image_grid_thw"][0])
    assert smart_resize(*size, ImageGrid(28, *bounds)) == (grid_h * 14, grid_w * 14)


def test_a_box_maps_back_through_both_resizes() -> None:
    # a 1280 x 720 camera image, sent at 640 px, seen by Qwen2.5-VL as 644 x 364
    assert model_image_size(1280, 720, 640, QWEN25) == (644, 364)
    assert model_image_size(640, 480, 0, QWEN25) == (644, 476)
    k = camera_matrix(CameraConfig(hfov_deg=90.0), 1280, 720)
    (right,) = grounded_objects('[{"bbox_2d": [322, 0, 644, 364], "label": "door"}]',
                                (1280, 720), (644, 364), k, 8)
    assert right.box == (640.0, 0.0, 1280.0, 720.0)  # the right half of the camera's image
    assert right.bearing_deg == pytest.approx(-math.degrees(math.atan(0.5)))
    assert right.extent_deg == pytest.approx(45.0)


def test_bearings_at_the_centre_and_the_edges_of_the_image() -> None:
    k = camera_matrix(CameraConfig(hfov_deg=90.0), 640, 480)  # fx 320, cx 319.5

    def one(box: list[float]) -> Any:
        text = f'[{{"bbox_2d": {box}, "label": "x", "confidence": 0.75}}]'
        return grounded_objects(text, (640, 480), (640, 480), k, 8)[0]

    whole = one([0, 0, 640, 480])
    assert whole.bearing_deg == pytest.approx(0.0, abs=1e-9)
    assert whole.extent_deg == pytest.approx(90.0)  # the whole field of view
    assert whole.confidence == 0.75
    centre = one([310, 200, 330, 280])
    assert centre.bearing_deg == pytest.approx(0.0, abs=1e-9)
    left, right = one([0, 0, 320, 480]), one([320, 0, 640, 480])
    assert left.bearing_deg == pytest.approx(math.degrees(math.atan(0.5)))  # left > 0
    assert right.bearing_deg == pytest.approx(-left.bearing_deg)
    assert left.extent_deg == pytest.approx(45.0) == right.extent_deg
    edge = one([0, 0, 1, 480])  # one pixel wide at the left edge: just inside 45 degrees
    assert 44.9 < edge.bearing_deg < 45.0 and 0.0 < edge.extent_deg < 0.2
    # the principal point where the calibration puts it, not the image centre
    off = camera_matrix(CameraConfig(fx=500.0, cx=200.0), 640, 480)
    (at_cx,) = grounded_objects('[{"bbox_2d": [190.5, 0, 210.5, 9], "label": "x"}]',
                                (640, 480), (640, 480), off, 8)
    assert at_cx.bearing_deg == pytest.approx(0.0, abs=1e-9)
    assert at_cx.extent_deg == pytest.approx(2 * math.degrees(math.atan(10 / 500)))


def test_intrinsics_from_camera_info_against_the_field_of_view_fallback() -> None:
    # a 60-degree camera calibrated at 1280 x 720, its key frames stored at 640 x 360
    fx = 640 / math.tan(math.radians(30))
    info = CameraInfo(width=1280, height=720, fx=fx, fy=fx, cx=639.5, cy=359.5)
    camera = info.to_config()
    assert (camera.width, camera.height) == (1280, 720)
    k = camera_matrix(camera, 640, 360)
    assert k[0, 0] == pytest.approx(fx / 2) and k[0, 2] == pytest.approx(319.5)
    assert k[1, 2] == pytest.approx(179.5)
    fallback = camera_matrix(CameraConfig(), 640, 360)  # 70 degrees, from the width alone
    whole = '[{"bbox_2d": [0, 0, 644, 364], "label": "wall"}]'
    (calibrated,) = grounded_objects(whole, (640, 360), (644, 364), k, 8)
    (guessed,) = grounded_objects(whole, (640, 360), (644, 364), fallback, 8)
    assert calibrated.extent_deg == pytest.approx(60.0)
    assert guessed.extent_deg == pytest.approx(70.0)
    left = '[{"bbox_2d": [0, 0, 322, 364], "label": "door"}]'
    (calibrated,) = grounded_objects(left, (640, 360), (644, 364), k, 8)
    assert calibrated.bearing_deg == pytest.approx(
        math.degrees(math.atan(math.tan(math.radians(30)) / 2)))
    # intrinsics without the size they are for are taken as the image's own
    assert camera_matrix(CameraConfig(fx=300.0), 640, 360)[0, 0] == 300.0


@pytest.mark.parametrize(("reply", "why"), [
    ('[{"bbox_2d": [0, 0, 10, 10], "label": "cup"', "not valid JSON"),
    ("I see a cup on the table.", "not valid JSON"),
    ('{"answer": 3}', "has no label"),
    ('[{"bbox_2d": [0, 0, 10, 10]}]', "has no label"),
    ('[{"bbox_2d": [0, 0, 10, 10], "label": " "}]', "has no label"),
    ('[{"bbox_2d": [0, 0, 10, 10], "label": "' + "cup " * 30 + '"}]', "at most 80"),
    ('[{"bbox_2d": [0, 0, 700, 10], "label": "cup"}]', "outside the 644x476 image"),
    ('[{"bbox_2d": [-3, 0, 10, 10], "label": "cup"}]', "outside"),
    ('[{"bbox_2d": [20, 0, 10, 10], "label": "cup"}]', "empty"),
    ('[{"bbox_2d": [0, 0, 10], "label": "cup"}]', "4 numbers"),
    ('[{"bbox_2d": [0, 0, "10", 10], "label": "cup"}]', "4 numbers"),
    ('[1, 2]', "not a JSON list of objects"),
])
def test_a_malformed_reply_is_refused_with_its_reason(reply: str, why: str) -> None:
    k = camera_matrix(CameraConfig(), 640, 480)
    with pytest.raises(GroundingError, match=why):
        grounded_objects(reply, (640, 480), (644, 476), k, 8)


def test_the_boxes_are_taken_out_of_a_perception_reply() -> None:
    fenced = '1. rotate left\n2. a red chair\n```json\n[{"bbox_2d": [1, 2, 3, 4], ' \
             '"label": "red chair"}]\n```\n3. the red chair'
    assert split_boxes(fenced) == ("1. rotate left\n2. a red chair\n3. the red chair",
                                   '[{"bbox_2d": [1, 2, 3, 4], "label": "red chair"}]\n')
    bare = 'a wall ahead [{"bbox_2d": [1, 2, 3, 4], "label": "wall"}]'
    assert split_boxes(bare) == ("a wall ahead", '[{"bbox_2d": [1, 2, 3, 4], "label": "wall"}]')
    cut = "1. move forward\n2. a door\n```json\n[{\"bbox_2d\": [1, 2,"  # cut at the token limit
    assert split_boxes(cut)[0] == "1. move forward\n2. a door"
    assert split_boxes("1. stop\n2. [see above]") == ("1. stop\n2. [see above]", None)
    assert grounded_objects("[]", (64, 48), (56, 56), camera_matrix(CameraConfig(), 64, 48), 8) \
        == ()


# -- configuration and prompts ---------------------------------------------------------------


def test_grounding_keys_are_validated() -> None:
    base = {"base": "tiny"}
    cfg = config_from_dict({**base, "perception": {"grounding": {"mode": "reply"}}})
    assert cfg.perception.grounding.mode == "reply"
    assert cfg.perception.grounding.max_pixels == QWEN25.max_pixels
    for bad, key in (({"mode": "both"}, "perception.grounding.mode"),
                     ({"min_pixels": 10, "max_pixels": 5}, "perception.grounding"),
                     ({"max_objects": 0}, "perception.grounding.max_objects")):
        with pytest.raises(ConfigError, match=key):
            config_from_dict({**base, "perception": {"grounding": bad}})


def test_grounding_wording_leaves_the_prompt_version_alone(tmp_path: Path) -> None:
    default = load_prompts()
    text = (Path(__file__).parents[1] / "config" / "prompts.yaml").read_text()
    without = "\n".join(line for line in text.split("\ngrounding")[0].splitlines())
    (tmp_path / "old.yaml").write_text(without + "\n")
    old = load_prompts(tmp_path / "old.yaml")  # a file from before grounding still loads
    assert old.version == default.version and old.grounding == default.grounding
    (tmp_path / "new.yaml").write_text(text.replace("most salient", "largest"))
    new = load_prompts(tmp_path / "new.yaml")
    assert new.version == default.version
    assert new.grounding_version != default.grounding_version
    (tmp_path / "bad.yaml").write_text(text.replace("at most {max_objects}.", "at most."))
    with pytest.raises(ConfigError, match="grounding_streaming"):
        load_prompts(tmp_path / "bad.yaml")


# -- perception ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["request", "reply"])
def test_both_ways_of_asking_give_the_same_objects_and_text(mode: str) -> None:
    vlm = GroundingVLM([(0.0, 0.0, 0.5, 1.0, "red chair")], max_side=640)
    frames = _frames(3, 1280, 720)
    result = _perceiver(mode, vlm, camera=CameraConfig(hfov_deg=90.0)).describe(
        frames, [0.0, 1.0, 2.0], QUESTION)
    assert result.vlm_calls == (6 if mode == "request" else 3)
    for frame in result.frames:
        (chair,) = frame.objects
        assert chair.name == "red chair" and chair.box == (0.0, 0.0, 640.0, 720.0)
        assert chair.bearing_deg == pytest.approx(math.degrees(math.atan(0.5)))
        assert chair.confidence is None and chair.extent_deg == pytest.approx(45.0)
    assert [f.vlm_text for f in result.frames[1:]] == ["a wall ahead none"] * 2
    # the objects stay out of the frame lines: the text is what perception without them writes
    plain = _perceiver("off", GroundingVLM()).describe(frames, [0.0, 1.0, 2.0], QUESTION)
    assert result.text == plain.text == render(plain.record)
    assert "red chair\"" not in result.text and "bbox" not in result.text
    asked = [p for p in vlm.seen if "bbox_2d" in p]
    assert len(asked) == 3 and all("Where is the red chair?" in p for p in asked)


@pytest.mark.parametrize("mode", ["request", "reply"])
@pytest.mark.parametrize("reply", ['[{"bbox_2d": [0, 0, 10, 10], "label": "cup"',
                                   '[{"bbox_2d": [0, 0, 9999, 10], "label": "cup"}]',
                                   '[{"bbox_2d": [0, 0, 10, 10], "name": "cup"}]'])
def test_a_malformed_reply_costs_its_frames_objects_and_one_line(
        mode: str, reply: str, caplog: pytest.LogCaptureFixture) -> None:
    vlm = GroundingVLM(reply=reply)
    lm = ScriptedVLM(["<think>the chair is left</think><answer>A</answer>"])
    config = config_from_dict({"base": "tiny", "cache": {"enabled": False},
                               "perception": {"grounding": {"mode": mode}}})
    pipeline = load_pipeline(config, vlm=vlm, lm=lm)
    with caplog.at_level(logging.WARNING, logger=LOG):
        result = pipeline.ask_keyframes(_frames(3, 64, 48), [0.0, 1.0, 2.0],
                                        validate_query("Where is the red chair?",
                                                       ["A. left", "B. right"]))
    assert result.success and result.answer == "A"
    assert all(f.objects == () and f.vlm_text for f in result.frames)
    lines = _warnings(caplog)
    assert len(lines) == 3 and all("grounded objects are dropped" in line for line in lines)
    # one bad frame among good ones (the middle one: its pixels are 40) costs that frame only
    caplog.clear()
    good = GroundingVLM([(0.1, 0.1, 0.4, 0.9, "cup")], reply=reply,
                        reply_if=lambda image: image[0, 0, 0] == 40)
    perceiver = _perceiver(mode, good, max_side=64)
    with caplog.at_level(logging.WARNING, logger=LOG):
        frames = perceiver.describe(_frames(3, 64, 48), [0.0, 1.0, 2.0], QUESTION).frames
    assert [len(f.objects) for f in frames] == [1, 0, 1] and len(_warnings(caplog)) == 1


def test_grounding_replies_are_cached_by_their_prompt(tmp_path: Path) -> None:
    cache = ReplyCache(str(tmp_path / "cache"))
    vlm = GroundingVLM([(0.0, 0.0, 1.0, 1.0, "wall")])
    progress: list[tuple[int, int]] = []
    first = _perceiver("request", vlm, cache=cache).describe(
        _frames(3), [0.0, 1.0, 2.0], QUESTION,
        on_progress=lambda _s, done, total, _t: progress.append((done, total)))
    assert first.vlm_calls == 6 and progress == [(1, 3), (2, 3), (3, 3)]  # perception calls
    again = _perceiver("request", vlm, cache=cache).describe(_frames(3), [0.0, 1.0, 2.0],
                                                             QUESTION)
    assert again.vlm_calls == 0 and again.frames == first.frames
    other = format_question("Where is the blue door?", ["A. left", "B. right"])
    # another question: every call is new (its prompt names the question)
    assert _perceiver("request", vlm, cache=cache).describe(
        _frames(3), [0.0, 1.0, 2.0], other).vlm_calls == 6
    # perception without grounding finds its own replies cached: its calls are unchanged
    assert _perceiver("off", vlm, cache=cache).describe(
        _frames(3), [0.0, 1.0, 2.0], QUESTION).vlm_calls == 0


@pytest.mark.parametrize("mode", ["request", "reply"])
def test_streaming_perception_records_objects_into_the_memory(
        mode: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from embodied_r_ros.memory import MemoryRecorder, SqliteMemoryStore

    vlm = GroundingVLM([(0.5, 0.2, 1.0, 0.8, "bench"), (0.0, 0.0, 0.2, 0.2, "lamp"),
                        (0.3, 0.3, 0.4, 0.4, "cup")])
    perceiver = _perceiver(mode, vlm, cache=ReplyCache(None), mode="streaming",
                           grounding={"mode": mode, "max_objects": 2})
    frames = _frames(2)
    first = perceiver.prefetch(None, frames[0], stamp=1.0)
    second = perceiver.prefetch(frames[0], frames[1], stamp=2.0)
    assert [o.name for o in second.objects] == ["bench", "lamp"]  # capped at max_objects
    asked = [p for p in vlm.seen if "bbox_2d" in p]
    assert asked and all("at most 2" in p and "question" not in p for p in asked)
    calls = len(vlm.seen)
    # a question in streaming mode reads what the background grounded
    result = perceiver.describe(frames, [1.0, 2.0], QUESTION)
    assert result.vlm_calls == 0 and len(vlm.seen) == calls
    assert result.frames[1].objects == second.objects
    vlm.reply = "no boxes today"
    with caplog.at_level(logging.WARNING, logger=LOG):
        third = perceiver.prefetch(frames[1], _frames(3)[2], stamp=3.0)
    assert third.objects == () and third.vlm_text and len(_warnings(caplog)) == 1
    with SqliteMemoryStore(tmp_path / "m.sqlite3", writable=True) as store:
        recorder = MemoryRecorder(store, thumbnail_side=0)
        ids = [recorder.record_frame(r) for r in (first, second, third)]
        rows = store.get(ids)
    assert [r.seen for r in rows] == [first.objects, second.objects, ()]  # every frame stored
    assert rows[1].seen[0].bearing_deg < 0 < rows[1].seen[1].bearing_deg


def test_a_bags_camera_info_places_the_objects_of_a_window() -> None:
    """What ``embodied-r-train build`` does with a bag's CameraInfo: the robot's call, with
    the camera's intrinsics for the motions and the objects alike."""
    config = config_from_dict({"base": "tiny", "cache": {"enabled": False},
                               "perception": {"grounding": {"mode": "request"}}})
    vlm = GroundingVLM([(0.0, 0.0, 1.0, 1.0, "wall")], max_side=64)
    pipeline = load_pipeline(config, vlm=vlm, lm=ScriptedVLM(["x"]))
    fx = 640 / math.tan(math.radians(30))  # 60 degrees, calibrated at 1280 x 720
    camera = CameraInfo(width=1280, height=720, fx=fx, fy=fx, cx=639.5, cy=359.5).to_config()
    images, stamps = _frames(2, 128, 72), [0.0, 1.0]
    window = pipeline.perceive_window(images, stamps, Question("Where?"), [None], camera=camera)
    assert [o.extent_deg for f in window.frames for o in f.objects] == pytest.approx([60.0] * 2)
    guessed = pipeline.perceive_window(images, stamps, Question("Where?"), [None])
    assert [o.extent_deg for f in guessed.frames for o in f.objects] == pytest.approx([70.0] * 2)
    assert window.text == guessed.text  # the objects are not in the text


def test_geometric_perception_ignores_grounding() -> None:
    cfg = PerceptionConfig(backend="geometric", grounding={"mode": "request"})
    frame = np.zeros((48, 64, 3), np.uint8)
    frame[:, :20] = (220, 20, 20)
    result = Perceiver(cfg).describe([frame], [0.0], QUESTION)
    assert [o.colour for o in result.frames[0].objects] == ["red"]


# -- the real backends -----------------------------------------------------------------------


def test_grounding_through_the_openai_backend_on_loopback() -> None:
    from http_helpers import openai_cfg

    from embodied_r_ros.backends import create_backend
    from embodied_r_ros.serving import serve

    # the server's model sees the JPEG the client sent (shrunk to 320 px) and answers in the
    # pixels its processor would make of that: the right half, and a thin box at the left edge
    served = GroundingVLM([(0.5, 0.0, 1.0, 1.0, "door"), (0.0, 0.4, 0.01, 0.6, "pole")])
    with serve(served) as server:
        client = create_backend(openai_cfg(server.url, image_max_side=320))
        cfg = PerceptionConfig(vlm=ModelConfig(model=client.model_id, backend="openai",
                                               base_url=server.url, image_max_side=320),
                               grounding={"mode": "request"},
                               camera=CameraConfig(hfov_deg=90.0))
        result = Perceiver(cfg, client).describe(_frames(2, 1280, 720), [0.0, 1.0], QUESTION)
        client.close()
    assert set(served.sizes) == {(320, 180)} and client.image_grid is None
    for frame in result.frames:
        door, pole = frame.objects
        assert door.box == pytest.approx((640.0, 0.0, 1280.0, 720.0), abs=1.0)
        assert door.bearing_deg == pytest.approx(-math.degrees(math.atan(0.5)), abs=0.1)
        assert 44.0 < pole.bearing_deg < 45.0


@pytest.mark.parametrize("mode", ["request", "reply"])
def test_the_tiny_qwen25_vl_survives_its_own_garbage(
        mode: str, tiny_vlm: ChatBackend, tiny_lm: ChatBackend,
        caplog: pytest.LogCaptureFixture) -> None:
    assert tiny_vlm.image_grid == ImageGrid(28, 3136, 224 * 224)  # its processor's bounds
    config = config_from_dict({"base": "tiny", "cache": {"enabled": False},
                               "perception": {"grounding": {"mode": mode},
                                              "vlm": {"max_new_tokens": 12}}})
    pipeline = load_pipeline(config, vlm=tiny_vlm, lm=tiny_lm)
    with caplog.at_level(logging.WARNING, logger=LOG):
        result = pipeline.ask_keyframes(_frames(3, 64, 48), [0.0, 1.0, 2.0],
                                        validate_query("Where is the red chair?",
                                                       ["A. left", "B. right"]))
    assert result.success and result.perception
    assert all(f.objects == () for f in result.frames)
    assert len(_warnings(caplog)) == 3


def test_a_dataset_fingerprint_counts_the_grounding_wording_only_where_grounding_is_on(
        tmp_path: Path) -> None:
    from embodied_r_ros.core.config import CONFIG_DIR
    from embodied_r_ros.core.profiles import load_config
    from embodied_r_training.data.journal import settings_fingerprint

    edited = tmp_path / "prompts.yaml"
    edited.write_text((CONFIG_DIR / "prompts.yaml").read_text().replace("most salient",
                                                                        "largest"))

    def fingerprint(mode: str, prompts: str | None = None) -> str:
        overrides: dict[str, Any] = {"perception": {"grounding": {"mode": mode}}}
        if prompts:
            overrides["prompts"] = prompts
        return settings_fingerprint(load_config("tiny", overrides=overrides), "tiny-vlm", {})

    assert fingerprint("off", str(edited)) == fingerprint("off")
    assert fingerprint("request", str(edited)) != fingerprint("request")
    assert fingerprint("request") != fingerprint("off")
