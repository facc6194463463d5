"""The lab's scripted VLM: truth boxes against the renderers' pixels, frames identified from
the JPEGs a backend sends, and its replies through the project's OpenAI backend on loopback."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from http_helpers import free_port, http_json, openai_cfg
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

from embodied_r_ros.backends import create_backend
from embodied_r_ros.backends.images import from_data_url, to_data_url
from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.images import as_stored
from embodied_r_ros.core.perception import parse_reply, vlm_conversation
from embodied_r_ros.core.prompts import default_prompts
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.serving import OpenAIServer, serve
from embodied_r_ros.sim.generate import generate_world
from embodied_r_ros.sim.render import RenderedFrame, Renderer
from embodied_r_ros.sim.scene import object_mesh
from embodied_r_ros.sim.world import World, WorldSpec, build_world
from lab.frame_match import FrameMatcher, NotAFrame
from lab.long_world.world import LongWorldSpec, build_long_world
from lab.scripted_replies import SYNONYMS, ScriptSettings
from lab.scripted_vlm import ScriptedVLM, main
from lab.truth_boxes import TruthTable, projected_box, render_truth, truth_world

ROOT = Path(__file__).resolve().parents[1]
WORLD = WorldSpec(seed=1, frames=60, width=320, height=240, rate_hz=2.0)
GROUNDING = ("Locate every object mentioned in the following question in this image. Do not "
             "answer the question and do not choose an option.\n\n{question}\n\nOutput the "
             'bounding box of each object you find as a JSON list: [{{"bbox_2d": [x1, y1, x2, '
             'y2], "label": "object name"}}]. Output [] if none of them is visible.')
SALIENT = ('Locate the most salient objects in this image, at most {n}. Output the bounding box '
           'of each as a JSON list: [{{"bbox_2d": [x1, y1, x2, y2], "label": "object name"}}].')


@pytest.fixture(scope="module")
def short() -> tuple[World, TruthTable, list[RenderedFrame]]:
    world = build_world(WORLD)
    renderer = Renderer(world.scene, world.camera)
    return world, render_truth(truth_world(world)), [renderer.render(p) for p in world.poses]


@pytest.fixture(scope="module")
def served(short: tuple[World, TruthTable, list[RenderedFrame]]
           ) -> Iterator[tuple[ScriptedVLM, OpenAIServer]]:
    world, table, _ = short
    vlm = ScriptedVLM.for_world(world, ScriptSettings(seed=3), table=table)
    with serve(vlm) as server:
        yield vlm, server


def ask(image: np.ndarray, text: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image", "image": image},
                                         {"type": "text", "text": text}]}]


def boxes_of(reply: str) -> list[dict]:
    found = re.search(r"```json\n(.*?)\n```", reply, re.DOTALL)
    assert found, reply
    return json.loads(found.group(1))


def busy_frame(table: TruthTable, objects: int = 3) -> int:
    """A frame showing at least ``objects`` objects clearly."""
    clear = (table.pixels >= 0.003 * table.width * table.height).sum(axis=1)
    return int(np.flatnonzero(clear >= objects)[0])


def test_truth_boxes_are_the_rendered_pixels(
        short: tuple[World, TruthTable, list[RenderedFrame]]) -> None:
    world, table, frames = short
    planes = world.camera.frustum_planes(margin_px=0.0)
    shown = 0
    for i, frame in enumerate(frames):
        assert np.array_equal(table.pixels[i], frame.object_pixels)
        listed = {b.index: b for b in table.boxes(i)}
        for k, obj in enumerate(world.scene.objects):
            if frame.object_pixels[k] == 0:
                assert k not in listed and np.isnan(table.visible[i, k]).all()
                continue
            shown += 1
            x0, y0, x1, y1 = (int(v) for v in listed[k].box)
            mask = frame.ids == k + 1
            assert mask[y0:y1, x0:x1].sum() == mask.sum()  # every pixel inside
            assert mask[y0].any() and mask[y1 - 1].any()  # and the box is tight
            assert mask[:, x0].any() and mask[:, x1 - 1].any()
            # the mesh projected through the camera, independently of the rasteriser,
            # spans the visible pixels (OpenCV's polygon fill reaches up to a pixel beyond
            # the exact outline)
            px0, py0, px1, py1 = projected_box(world.camera, world.poses[i], object_mesh(obj),
                                               planes)
            assert px0 - 1.5 <= x0 and py0 - 1.5 <= y0 and x1 <= px1 + 1.5 and y1 <= py1 + 1.5
    assert shown > 50


def test_walls_hide_objects_in_the_long_world() -> None:
    world = build_long_world(LongWorldSpec(seed=3, duration_s=60.0, columns=1, n_objects=9,
                                           shared_names=2))
    table = render_truth(truth_world(world))
    planes = world.camera.frustum_planes(margin_px=0.0)
    behind_walls = 0
    for i, pose in enumerate(world.poses):
        listed = {b.index for b in table.boxes(i)}
        assert listed == set(np.flatnonzero(table.pixels[i]))
        for k, obj in enumerate(world.objects):
            box = projected_box(world.camera, pose, object_mesh(obj), planes)
            in_view = box is not None and (box[2] - box[0]) * (box[3] - box[1]) > 100
            if in_view and table.pixels[i, k] == 0:  # in the field of view, yet hidden
                assert k not in listed
                behind_walls += world.object_areas[k] != world.area_of_frame(i)
    assert behind_walls > 0  # objects of other rooms the walls hide: no box


def test_frames_are_identified_from_shrunk_jpegs() -> None:
    world = build_world(WorldSpec(seed=1, frames=40, width=320, height=240))  # 10 Hz
    table = render_truth(truth_world(world))
    matcher = FrameMatcher(table.thumbs)
    renderer = Renderer(world.scene, world.camera)
    for i, pose in enumerate(world.poses):
        image = renderer.render(pose).image
        sent = from_data_url(to_data_url(as_stored(image, 160)[0], 160))  # stored, then sent
        found = matcher.match(sent)
        assert found.frame == i and found.rms < found.runner_up_rms / 2
    other = build_world(WorldSpec(seed=2, frames=1, width=320, height=240))
    foreign = Renderer(other.scene, other.camera).render(other.poses[0]).image
    noise = np.random.default_rng(0).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    for image in (foreign, noise):
        with pytest.raises(NotAFrame, match="differs by"):
            matcher.identify(image)


def test_grounding_boxes_map_back_to_the_truth(
        short: tuple[World, TruthTable, list[RenderedFrame]],
        served: tuple[ScriptedVLM, OpenAIServer]) -> None:
    world, table, frames = short
    _, server = served
    f = busy_frame(table)
    truth = table.boxes(f, min_pixels=231)
    absent = next(o.name for k, o in enumerate(world.scene.objects) if table.pixels[f, k] == 0)
    asked = {truth[0].name, truth[-1].name}
    question = format_question(f"Which is closer to you, the {truth[0].name}, the "
                               f"{truth[-1].name} or the {absent}?",
                               [f"A. {truth[0].name}", f"B. {truth[-1].name}", f"C. {absent}"])
    client = create_backend(openai_cfg(server.url, image_max_side=160, max_new_tokens=256))
    named, salient = client.generate([ask(frames[f].image, GROUNDING.format(question=question)),
                                      ask(frames[f].image, SALIENT.format(n=2))])
    height, width = smart_resize(120, 160)  # the 160 x 120 JPEG as the processor resizes it
    sx, sy = table.width / width, table.height / height
    got = boxes_of(named)
    assert {b["label"] for b in got} == asked  # the question's objects in view, no others
    by_name = {b.name: b for b in truth}
    for item in got:
        x0, y0, x1, y1 = item["bbox_2d"]
        assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height
        tx0, ty0, tx1, ty1 = by_name[item["label"]].box
        # 5 % of the side per edge at 4 SD, and half a model pixel of rounding
        tol_x, tol_y = 4 * 0.05 * (tx1 - tx0) + sx, 4 * 0.05 * (ty1 - ty0) + sy
        assert abs(x0 * sx - tx0) <= tol_x and abs(x1 * sx - tx1) <= tol_x
        assert abs(y0 * sy - ty0) <= tol_y and abs(y1 * sy - ty1) <= tol_y
    assert [b["label"] for b in boxes_of(salient)] == [truth[0].name, truth[1].name]


def test_pair_replies_state_the_true_action(
        short: tuple[World, TruthTable, list[RenderedFrame]],
        served: tuple[ScriptedVLM, OpenAIServer]) -> None:
    world, table, frames = short
    vlm, server = served
    segments = world.trajectory.segments
    pairs = []  # consecutive frames inside one segment: its action is the truth
    for i in range(world.n_frames - 1):
        t0, t1 = float(world.times[i]), float(world.times[i + 1])
        seg = segments[world.trajectory.segment_index(t0)]
        if seg.t0 < t0 and t1 < seg.t1:
            pairs.append((i, i + 1, seg.action))
    assert len({a for _, _, a in pairs}) >= 5
    name = world.scene.objects[0].name
    question = format_question(f"Where is the {name}?", ["A. left", "B. right"])
    convs = [vlm_conversation(1, [frames[i].image, frames[j].image], question,
                              default_prompts()) for i, j, _ in pairs]
    client = create_backend(openai_cfg(server.url, image_max_side=160, max_new_tokens=256,
                                       max_concurrency=4))
    replies = client.generate(convs)
    for (_, j, action), reply in zip(pairs, replies, strict=True):
        read = parse_reply(reply)
        assert read.action == action, reply
        in_view = table.pixels[j, 0] >= vlm.scripter._min_pixels
        assert bool(re.search(f"The {name} is (ahead|straight|to the)", reply)) == in_view
        assert (f"The {name} is not in view" in reply) != in_view


def test_replies_are_seeded_and_noise_is_configurable(
        short: tuple[World, TruthTable, list[RenderedFrame]]) -> None:
    world, table, frames = short
    f = busy_frame(table)
    conv = ask(frames[f].image, SALIENT.format(n=5))

    def boxes(**settings: float) -> list[dict]:
        vlm = ScriptedVLM.for_world(world, ScriptSettings(**settings), table=table)
        return boxes_of(vlm.generate([conv])[0])

    assert boxes(seed=1) == boxes(seed=1) != boxes(seed=2)
    width, height = smart_resize(240, 320)[::-1]
    exact = boxes(box_noise=0.0)
    truth = table.boxes(f, min_pixels=231)[:5]
    assert [b["bbox_2d"] for b in exact] == [
        [round(v * s) for v, s in zip(t.box, (width / 320, height / 240) * 2, strict=True)]
        for t in truth]
    assert boxes(miss_rate=1.0) == []
    vlm = ScriptedVLM.for_world(world, table=table)
    elsewhere = format_question("Where is the chair?", ["A. left", "B. right"])
    assert boxes_of(vlm.generate([ask(frames[f].image, GROUNDING.format(question=elsewhere))
                                  ])[0]) == []  # a question naming nothing here: no boxes
    names = {o.name for o in world.scene.objects}
    relabelled = boxes(wrong_label_rate=1.0)
    assert all(b["label"] in names - {t.name} for b, t in zip(relabelled, truth, strict=True))
    # a synonym or a broader word for the shape, the colour kept ("red crate" for a red box)
    renamed = [(b["label"], t.name.split(" ", 1)) for b, t in
               zip(boxes(synonym_rate=1.0), truth, strict=True)]
    assert renamed and all(label.startswith(f"{colour} ") and label[len(colour) + 1:]
                           in SYNONYMS[shape] for label, (colour, shape) in renamed)
    with pytest.raises(ValueError, match="synonym-rate"):
        ScriptSettings(synonym_rate=1.5).validate()
    # a perception prompt that asks for boxes too gets both, the boxes of the last image
    text = default_prompts().pair_prompt(None) + "\n\n" + SALIENT.format(n=3)
    reply = ScriptedVLM.for_world(world, table=table).generate(
        [ask(frames[f - 1].image, "") + ask(frames[f].image, text)])[0]
    assert parse_reply(reply.split("```")[0]).action is not None
    assert [b["label"] for b in boxes_of(reply)] == [t.name for t in truth[:3]]


def test_bad_requests_get_openai_errors(
        short: tuple[World, TruthTable, list[RenderedFrame]],
        served: tuple[ScriptedVLM, OpenAIServer]) -> None:
    _, table, frames = short
    _, server = served
    url = f"{server.url}/chat/completions"
    noise = np.random.default_rng(1).integers(0, 256, (120, 160, 3), dtype=np.uint8)

    def body(content: object) -> bytes:
        return json.dumps({"model": "scripted-vlm",
                           "messages": [{"role": "user", "content": content}]}).encode()

    def image(im: np.ndarray) -> dict:
        return {"type": "image_url", "image_url": {"url": to_data_url(im)}}

    cases = {
        b"{not json": "not valid JSON",
        body("Describe the scene."): "has no image",
        body([image(noise), {"type": "text", "text": "Describe the scene."}]):
            "image 1 is not a frame of this world",
        body([{"type": "image_url", "image_url": {"url": "http://example.com/a.jpg"}}]):
            "data URLs",
    }
    for raw, message in cases.items():
        status, reply = http_json(url, raw)
        assert status == 400 and reply["error"]["type"] == "invalid_request_error"
        assert message in reply["error"]["message"]
    client = create_backend(openai_cfg(server.url, max_new_tokens=256))
    with pytest.raises(BackendError, match="HTTP 400.*not a frame"):
        client.generate([ask(noise, "Describe the scene.")])
    f = busy_frame(table)
    assert client.generate([ask(frames[f].image, "Describe the scene.")])[0].startswith("I see ")
    status, models = http_json(f"{server.url}/models")
    assert status == 200 and models["data"][0]["id"] == "scripted-vlm"


def test_the_command_serves_a_generated_world(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--world", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    world = tmp_path / "world"
    generate_world(WorldSpec(seed=1, frames=8, width=160, height=120), world, counts=0,
                   bag=False, video=False, decides=None)
    assert main(["--world", str(world), "--box-noise", "2"]) == 2
    assert "box-noise must be between 0 and 1" in capsys.readouterr().err
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "training")])}
    proc = subprocess.Popen([sys.executable, "-m", "lab.scripted_vlm", "--world", str(world),
                             "--port", str(port)], cwd=ROOT, env=env, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = ""
        while "serving the scripted VLM" not in line:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "the command ended before serving"
        status, models = http_json(f"http://127.0.0.1:{port}/v1/models")
        assert status == 200 and models["data"][0]["id"] == "scripted-vlm"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert (world / "scripted_truth.npz").is_file()
