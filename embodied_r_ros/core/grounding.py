"""Objects a VLM grounds in a key frame, placed by bearing through the camera's intrinsics.

Qwen2.5-VL grounds natively: asked for a JSON list of ``{"bbox_2d": [x1, y1, x2, y2], "label":
...}``, it answers in absolute pixels of the image *as its processor resized it*: the backend
first shrinks the frame to ``image_max_side``, then the processor's ``smart_resize`` rounds
both sides to multiples of 28 within its pixel bounds. Both steps scale the whole image, so a
box is mapped back to the camera image by the ratio of the sizes (:func:`model_image_size`).

A box then becomes a bearing (left > 0, from the box centre through ``fx`` and ``cx``), an
apparent width (``extent_deg``: the angle between the rays through its left and right edges)
and the angle of its bottom edge below the optical axis (``foot_deg``, through ``fy`` and
``cy``; none where the box reaches the image's bottom edge and the object's foot may be cut
off): where the camera's height and pitch are known, that is a floor distance.
Box coordinates are edges (``[0, 0, W, H]`` is the whole image); the intrinsics use pixel-index
coordinates (pixel centres at integers, ``cx = (W - 1) / 2`` for a centred axis), as
:func:`~embodied_r_ros.core.egomotion.camera_matrix` does, so a box over the whole image has
bearing 0 and spans the whole field of view.

A reply that is not a JSON list of such boxes, or with a box outside the image or without a
label, raises :class:`GroundingError`: the caller drops that frame's objects, never the frame.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from embodied_r_ros.core.chat import Conversation, ImageGrid
from embodied_r_ros.core.config import GroundingConfig
from embodied_r_ros.core.images import max_side_size
from embodied_r_ros.core.prompts import PromptSet
from embodied_r_ros.core.records import SeenObject

#: a fenced code block (```json ... ```); an unclosed one runs to the end of the reply (a
#: reply cut at its token limit)
_FENCE = re.compile(r"```(?:json)?[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_CONFIDENCE_KEYS = ("confidence", "score")
#: a longer label is not an object's name
MAX_LABEL_CHARS = 80


class GroundingError(ValueError):
    """A grounding reply that cannot be used; the message says what was wrong."""


def configured_grid(cfg: GroundingConfig) -> ImageGrid:
    return ImageGrid(cfg.factor, cfg.min_pixels, cfg.max_pixels)


def smart_resize(height: int, width: int, grid: ImageGrid) -> tuple[int, int]:
    """``(height, width)`` as Qwen2-VL's processor resizes an image (transformers'
    ``qwen2_vl`` ``smart_resize``, to the letter: Python's rounding, then the pixel bounds)."""
    factor = grid.factor
    if max(height, width) / min(height, width) > 200:
        raise GroundingError(f"aspect ratio of {width}x{height} is over 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > grid.max_pixels:
        beta = math.sqrt((height * width) / grid.max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < grid.min_pixels:
        beta = math.sqrt(grid.min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def model_image_size(width: int, height: int, max_side: int, grid: ImageGrid
                     ) -> tuple[int, int]:
    """``(width, height)`` of the image the model sees for a camera image of that size: shrunk
    to ``max_side`` by the backend (0: as is), then resized by the processor."""
    w, h = max_side_size(width, height, max_side)
    h_bar, w_bar = smart_resize(h, w, grid)
    return w_bar, h_bar


def box_angles(box: Sequence[float], k: np.ndarray) -> tuple[float, float]:
    """``(bearing_deg, extent_deg)`` of a box in the pixels ``k`` is for: the horizontal angle
    of its centre from the optical axis (left > 0) and the angle its width spans."""
    x1, _, x2, _ = box
    fx, cx = float(k[0, 0]), float(k[0, 2])

    def left_of_axis(edge: float) -> float:  # an edge coordinate's ray, left > 0
        return math.atan2(cx - (edge - 0.5), fx)

    bearing = math.atan2(cx - ((x1 + x2) / 2 - 0.5), fx)
    return math.degrees(bearing), math.degrees(left_of_axis(x1) - left_of_axis(x2))


def box_foot_deg(box: Sequence[float], k: np.ndarray, height: int) -> float | None:
    """The angle of a box's bottom edge below the optical axis (degrees, down > 0), in the
    pixels ``k`` is for, an image ``height`` rows high; None where the box reaches the
    bottom row (the object may go on below the image)."""
    y2 = float(box[3])
    if y2 >= height - 1.0:
        return None
    fy, cy = float(k[1, 1]), float(k[1, 2])
    return math.degrees(math.atan2((y2 - 0.5) - cy, fy))


def split_boxes(reply: str) -> tuple[str, str | None]:
    """A perception reply that was asked for boxes too (``mode: reply``): its text without
    the boxes' JSON, and that JSON (None: the reply has none). A fenced block is the JSON
    wherever it is; else the first JSON list of objects in the reply."""
    fence = _FENCE.search(reply)
    if fence is not None:
        span, found = fence.span(), fence.group(1)
    else:
        bare = _bare_list(reply)
        if bare is None:
            return reply, None
        span, found = bare, reply[bare[0]:bare[1]]
    before, after = reply[: span[0]].rstrip(), reply[span[1]:].strip()
    return (f"{before}\n{after}" if before and after else before or after), found


def _bare_list(text: str) -> tuple[int, int] | None:
    """The span of the first JSON list of objects (or empty list) in ``text``."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\[", text):
        try:
            value, end = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, list) and all(isinstance(v, dict) for v in value):
            return match.start(), end
    return None


def parse_boxes(text: str) -> list[dict[str, Any]]:
    """The items of a grounding reply: a JSON list of objects, fenced or bare (a single
    object counts as a list of one)."""
    fence = _FENCE.search(text)
    body = (fence.group(1) if fence else text).strip()
    if fence is None and (span := _bare_list(body)) is not None:
        body = body[span[0]:span[1]]
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise GroundingError(f"not valid JSON ({exc.msg} at character {exc.pos})") from None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise GroundingError("not a JSON list of objects")
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _confidence(item: dict[str, Any]) -> float | None:
    for key in _CONFIDENCE_KEYS:
        value = _number(item.get(key))
        if value is not None and 0.0 <= value <= 1.0:
            return value
    return None


def grounded_objects(
    text: str,
    image_size: tuple[int, int],
    model_size: tuple[int, int],
    k: np.ndarray,
    max_objects: int,
) -> tuple[SeenObject, ...]:
    """The objects of a grounding reply (at most ``max_objects``, in the reply's order), boxes
    mapped from the model's image (``model_size``, width x height) to the camera image
    (``image_size``), whose intrinsics are ``k``. Raises :class:`GroundingError`."""
    (width, height), (mw, mh) = image_size, model_size
    objects = []
    for n, item in enumerate(parse_boxes(text)[:max_objects]):
        label = item.get("label")
        if not isinstance(label, str) or not label.strip():
            raise GroundingError(f"object {n} has no label")
        if len(label.strip()) > MAX_LABEL_CHARS:
            raise GroundingError(f"object {n} has a label of {len(label.strip())} characters "
                                 f"(at most {MAX_LABEL_CHARS})")
        raw = item.get("bbox_2d")
        box = [_number(v) for v in raw] if isinstance(raw, list) and len(raw) == 4 else None
        if box is None or any(v is None for v in box):
            raise GroundingError(f"object {n} ({label.strip()!r}) has no bbox_2d of 4 numbers")
        x1, y1, x2, y2 = box  # type: ignore[misc]
        if not (0.0 <= x1 < x2 <= mw and 0.0 <= y1 < y2 <= mh):
            raise GroundingError(f"object {n} ({label.strip()!r}): box {raw} is empty or "
                                 f"outside the {mw}x{mh} image the model saw")
        sx, sy = width / mw, height / mh
        camera_box = (x1 * sx, y1 * sy, x2 * sx, y2 * sy)
        bearing, extent = box_angles(camera_box, k)
        objects.append(SeenObject(label.strip(), bearing_deg=bearing, box=camera_box,
                                  confidence=_confidence(item), extent_deg=extent,
                                  foot_deg=box_foot_deg(camera_box, k, height)))
    return tuple(objects)


def grounding_conversation(image: np.ndarray, question_block: str | None, prompts: PromptSet,
                           max_objects: int) -> Conversation:
    """A grounding call (``mode: request``): the key frame alone, asked for the question's
    objects (``None``: streaming, the salient ones)."""
    text = prompts.grounding_prompt(question_block, max_objects)
    return [{"role": "user", "content": [{"type": "image", "image": image},
                                         {"type": "text", "text": text}]}]


def asking_boxes(conversation: Conversation, streaming: bool, prompts: PromptSet,
                 max_objects: int) -> Conversation:
    """A perception call that also asks for the last image's boxes (``mode: reply``): its
    prompt with the grounding request appended."""
    parts = list(conversation[-1]["content"])
    extra = prompts.grounding_reply_prompt(streaming, max_objects)
    parts[-1] = {"type": "text", "text": f"{parts[-1]['text']}\n\n{extra}"}
    return [*conversation[:-1], {**conversation[-1], "content": parts}]
