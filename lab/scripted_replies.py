"""What the scripted VLM answers, written from a synthetic world's truth.

A request's images are identified as frames of the world (:mod:`lab.frame_match`); its text
says what is asked:

- a grounding request (its prompt asks for ``bbox_2d``) gets the last image's objects as
  Qwen2.5-VL writes them, a JSON list of ``{"bbox_2d": [x1, y1, x2, y2], "label": name}`` in a
  ```json block, in the pixels of the image as Qwen2.5-VL's processor resizes it
  (``smart_resize`` of the request image's size): where the prompt holds a question
  ("Question: ..."), the objects in view it names (by name, "red box", or colour, "red
  object"), none if it names none; else the most salient ones. Largest first, at most the
  prompt's "at most N" or ``max_objects``. Boxes get Gaussian noise of ``box_noise`` times the
  box's width (x) and height (y); objects are left out at ``miss_rate`` and given another
  object's name at ``wrong_label_rate``, and the rest called by a synonym or a broader word
  (:data:`SYNONYMS`: "red crate" for a red box) at ``synonym_rate``;
- Embodied-R's perception prompts get a plain reply from the truth: frame 0 (one image) a
  description of the objects in view with their egocentric direction and distance; a pair
  (two images) "1. <the true primary action between the two frames' poses>", "2. <what came
  into view>" and, where the prompt has three items, "3. <the objects the prompt names and
  where they are>". A perception prompt that also asks for boxes (grounding ``mode: reply``)
  gets both, the boxes' block last.

Replies depend only on the settings, the identified frames, the text and the request's seed, so
one request gets one reply however its images were coded.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from embodied_r_ros.core.actions import ActionThresholds, primary_action
from embodied_r_ros.core.chat import ImageGrid
from embodied_r_ros.core.grounding import smart_resize
from embodied_r_ros.core.poses import Pose, heading_deg, relative_motion, wrap_deg
from embodied_r_ros.sim.scene import SceneObject
from embodied_r_ros.sim.visibility import MIN_SHARE
from lab.truth_boxes import TruthBox, TruthTable, TruthWorld

#: Qwen2.5-VL's processor (``Qwen2VLImageProcessor``): patch 14 x merge 2, at least 56 x 56
#: pixels, and at most its released preprocessor_config.json's 12845056 (transformers'
#: class default, 1003520, is Qwen2-VL's; both leave frames up to 1280 x 720 as they are)
FACTOR, MIN_PIXELS, MAX_PIXELS = 28, 56 * 56, 12845056
_AT_MOST = re.compile(r"\bat most (\d+)\b", re.IGNORECASE)
_AHEAD_DEG, _SIDE_DEG = 10.0, 30.0
#: what a VLM calls a shape besides its name: two synonyms and a broader word (the lab's
#: table, for noise like a real VLM's; the product never reads it)
SYNONYMS: dict[str, tuple[str, ...]] = {
    "box": ("crate", "cube", "container"), "cylinder": ("can", "drum", "column"),
    "cone": ("pylon", "traffic cone", "marker"), "sphere": ("ball", "orb", "toy")}
#: below these a pair's motion still gets its largest component's name (the prompt asks for
#: exactly one action)
_ANY_MOTION = ActionThresholds(rotation_deg=0.0, translation_m=0.0)


@dataclass(frozen=True)
class ScriptSettings:
    """The scripted VLM's noise and bounds; ``seed`` varies the noise, nothing else."""

    seed: int = 0
    box_noise: float = 0.05  # Gaussian SD of each box edge, as a fraction of the box's side
    miss_rate: float = 0.0  # share of the objects a grounding reply leaves out
    wrong_label_rate: float = 0.0  # share given another object's name
    synonym_rate: float = 0.0  # share of the rest named by a synonym or a broader word
    min_share: float = MIN_SHARE  # of the image an object must cover to be seen
    max_objects: int = 8  # salient objects per grounding reply, when the prompt gives none
    factor: int = FACTOR
    min_pixels: int = MIN_PIXELS
    max_pixels: int = MAX_PIXELS

    def validate(self) -> ScriptSettings:
        """Raise ``ValueError`` with a one-line reason for settings that make no sense."""
        for name in ("box_noise", "miss_rate", "wrong_label_rate", "synonym_rate", "min_share"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"{name.replace('_', '-')} must be between 0 and 1, got {value}")
        if self.max_objects < 1:
            raise ValueError(f"max-objects must be at least 1, got {self.max_objects}")
        if self.factor < 1 or not 1 <= self.min_pixels <= self.max_pixels:
            raise ValueError("the image grid needs factor >= 1 and 1 <= min-pixels <= max-pixels")
        return self


def model_size(width: int, height: int, s: ScriptSettings) -> tuple[int, int]:
    """(width, height) of a request image of that size as the processor resizes it."""
    h_bar, w_bar = smart_resize(height, width, ImageGrid(s.factor, s.min_pixels, s.max_pixels))
    return int(w_bar), int(h_bar)


def direction_words(bearing_deg: float) -> str:
    """An egocentric direction (left > 0) in the prompts' terms."""
    b = wrap_deg(bearing_deg)
    if abs(b) < _AHEAD_DEG:
        return "straight ahead"
    side = "left" if b > 0 else "right"
    if abs(b) < _SIDE_DEG:
        return f"ahead-{side}"
    if abs(b) < 90.0:
        return f"to the {side}"
    return f"behind to the {side}"


def where(obj: SceneObject, pose: Pose) -> str:
    """``ahead-left, about 2.4 m away``: where ``obj`` is from ``pose``."""
    bearing = heading_deg((pose.x, pose.y), (obj.x, obj.y)) - pose.yaw_deg
    return f"{direction_words(bearing)}, about {obj.distance_to_point(pose.x, pose.y):.1f} m away"


def true_action(a: Pose, b: Pose) -> str:
    """The paper's action word for the motion from pose ``a`` to pose ``b``."""
    motion = relative_motion(a, b)
    action = primary_action(motion) or primary_action(motion, _ANY_MOTION)
    assert action is not None  # with zero thresholds some component always names it
    return action


def named_objects(text: str, objects: Sequence[SceneObject]) -> set[int]:
    """Indices of the objects ``text`` names: by name ("red box") or by colour ("red object")."""
    low = text.lower()
    found = set()
    for k, obj in enumerate(objects):
        name = re.escape(obj.name.lower())
        colour = re.escape(obj.colour.lower())
        if re.search(rf"\b{name}\b", low) or re.search(
                rf"\b{colour} (?:object|thing|item)s?\b", low):
            found.add(k)
    return found


class Scripter:
    """Writes replies for one world from its truth (see the module notes)."""

    def __init__(self, world: TruthWorld, table: TruthTable, settings: ScriptSettings) -> None:
        self.world = world
        self.table = table
        self.settings = settings.validate()
        area = table.width * table.height
        self._min_pixels = max(1, math.ceil(settings.min_share * area))
        self._names = sorted({o.name for o in world.objects})

    def seen(self, frame: int) -> list[TruthBox]:
        """The objects frame ``frame`` shows clearly enough to be named, largest first."""
        return self.table.boxes(frame, self._min_pixels)

    # -- the reply ---------------------------------------------------------------------------

    def reply(self, text: str, frames: Sequence[int], sizes: Sequence[tuple[int, int]],
              request_seed: int | None = None) -> str:
        """The reply to a prompt ``text`` about ``frames`` (identified images, in order),
        whose request images were ``sizes`` (width, height) each."""
        if not frames:
            raise ValueError("the scripted VLM answers about frames of its world: the request "
                             "has no image")
        # a question's objects where the prompt holds one (format_question's block)
        named = named_objects(text, self.world.objects) if "Question:" in text else None
        grounding = "bbox_2d" in text
        perception = len(frames) > 1 or "describe the scene" in text.lower()
        parts = []
        if perception:
            if len(frames) == 1:
                parts.append(self.describe(frames[0], named))
            else:
                items = 2 if "two numbered items" in text.lower() else 3
                parts.append(self.pair(frames[-2], frames[-1], named, items))
        if grounding:
            rng = np.random.default_rng([self.settings.seed, _digest(text, frames, request_seed)])
            boxes = self.ground(frames[-1], sizes[-1], named, _cap(text, self.settings), rng)
            parts.append(f"```json\n{json.dumps(boxes)}\n```")
        if not parts:  # any other question about one image: what it shows
            parts.append(self.describe(frames[0], named))
        return "\n\n".join(parts)

    def ground(self, frame: int, size: tuple[int, int], named: set[int] | None, cap: int,
               rng: np.random.Generator) -> list[dict[str, object]]:
        """Grounded objects of ``frame`` in the model's pixels for a request image of ``size``:
        those of ``named`` in view (None: the salient ones)."""
        s = self.settings
        width, height = model_size(*size, s)
        sx, sy = width / self.table.width, height / self.table.height
        boxes = self.seen(frame)
        boxes = [b for b in boxes if named is None or b.index in named][:cap]
        out: list[dict[str, object]] = []
        for b in boxes:
            missed = rng.random() < s.miss_rate
            relabel = rng.random() < s.wrong_label_rate
            synonym = rng.random() < s.synonym_rate
            noise = rng.normal(0.0, 1.0, 4)
            if missed:
                continue
            label = b.name
            others = [n for n in self._names if n != b.name]
            if relabel and others:
                label = others[int(rng.integers(0, len(others)))]
            elif synonym:
                label = synonym_of(label, rng)
            x0, y0, x1, y1 = b.box[0] * sx, b.box[1] * sy, b.box[2] * sx, b.box[3] * sy
            sd = s.box_noise * np.array([x1 - x0, y1 - y0, x1 - x0, y1 - y0])
            out.append({"bbox_2d": _pixel_box(np.array([x0, y0, x1, y1]) + sd * noise,
                                              width, height), "label": label})
        return out

    def describe(self, frame: int, named: set[int] | None) -> str:
        """Frame 0's description: the objects in view, where they are, and the named ones
        that are not in view."""
        pose = self.world.poses[frame]
        seen = self.seen(frame)
        objects = self.world.objects
        if seen:
            phrases = [f"the {b.name} {where(objects[b.index], pose)}" for b in seen]
            text = f"I see {_join(phrases)}."
        else:
            text = "I see no distinct objects, only the walls and the floor."
        missing = sorted({objects[k].name for k in named or ()} - {b.name for b in seen})
        if missing:
            text += f" {_capital(_join([f'the {n}' for n in missing]))} " \
                    f"{'is' if len(missing) == 1 else 'are'} not in view."
        return text

    def pair(self, before: int, after: int, named: set[int] | None, items: int = 3) -> str:
        """The pair prompt's numbered items for the move from frame ``before`` to ``after``."""
        poses, objects = self.world.poses, self.world.objects
        pose = poses[after]
        earlier = {b.index for b in self.seen(before)}
        now = self.seen(after)
        new = [f"the {b.name} comes into view {where(objects[b.index], pose)}"
               for b in now if b.index not in earlier]
        lines = [f"1. {true_action(poses[before], pose)}",
                 f"2. {_capital(_join(new)) if new else 'Nothing new comes into view'}."]
        if items >= 3:
            lines.append(f"3. {self._named_view(now, named, pose)}")
        return "\n".join(lines)

    def _named_view(self, now: list[TruthBox], named: set[int] | None, pose: Pose) -> str:
        objects = self.world.objects
        if not named:
            return "None of the question's objects is in view."
        shown = [b for b in now if b.index in named]
        sentences = [f"The {b.name} is {where(objects[b.index], pose)}." for b in shown]
        missing = sorted({objects[k].name for k in named} - {b.name for b in shown})
        if missing:
            sentences.append(f"{_capital(_join([f'the {n}' for n in missing]))} "
                             f"{'is' if len(missing) == 1 else 'are'} not in view.")
        return " ".join(sentences)


def synonym_of(name: str, rng: np.random.Generator) -> str:
    """``name`` ("red box") with its shape called by a word of :data:`SYNONYMS` ("red
    crate"); a name of no shape there as it is."""
    words = name.split()
    others = SYNONYMS.get(words[-1]) if words else None
    if not others:
        return name
    return " ".join([*words[:-1], others[int(rng.integers(0, len(others)))]])


def _pixel_box(box: np.ndarray, width: int, height: int) -> list[int]:
    """Whole pixels inside the image, at least one pixel wide and high."""
    x0, x1 = sorted(int(round(float(np.clip(v, 0, width)))) for v in (box[0], box[2]))
    y0, y1 = sorted(int(round(float(np.clip(v, 0, height)))) for v in (box[1], box[3]))
    if x1 == x0:
        x0, x1 = (x0, x0 + 1) if x0 < width else (x0 - 1, x0)
    if y1 == y0:
        y0, y1 = (y0, y0 + 1) if y0 < height else (y0 - 1, y0)
    return [x0, y0, x1, y1]


def _cap(text: str, s: ScriptSettings) -> int:
    found = _AT_MOST.search(text)
    return max(1, int(found.group(1))) if found else s.max_objects


def _digest(text: str, frames: Sequence[int], request_seed: int | None) -> int:
    key = json.dumps([text, list(frames), request_seed]).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little")


def _join(phrases: Sequence[str]) -> str:
    if len(phrases) <= 1:
        return "".join(phrases)
    return f"{', '.join(phrases[:-1])} and {phrases[-1]}"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]

