"""Question-conditioned VLM perception of key frames, as in Embodied-R, sent concurrently.

Frame 0 gets a first-person scene description; every later key frame is sent together with the
previous one, and the VLM names the ego-action (from the paper's ten), the new spatial information
and the question's objects it sees. No call reads another's reply, so all calls of a question go
out together (``perception.concurrency``; 1 keeps the paper's one-after-another order) and the
replies are put back in frame order: the assembled text (``Frame i: After <action>, Observe:
<view>``, the paper's shape) is the same whatever order they arrive in.

Each reply is cached per call, keyed by that call's images (frame 0 alone, or the pair), its
prompt (question included), the model, the prompt version and the generation settings: a question
re-asked after the window slid by k key frames makes only the k calls whose pair is new (plus the
new first frame's). In ``streaming`` mode the prompts leave the question out, so descriptions made
in the background as key frames arrive serve every later question.

With ``perception.grounding`` on, the VLM also boxes objects in each key frame (the question's,
or in streaming mode the salient ones), by one extra call per key frame with the frame alone
(``request``) or in the perception call's own reply (``reply``, the boxes' JSON taken out before
the reply is read, so the observation is the text around it). The boxes become the frame
record's objects with bearings (:mod:`embodied_r_ros.core.grounding`); they are never written
into the frame lines. A bad grounding reply costs that frame's objects and one warning line.

Without a VLM (``geometric`` backend) the action comes from measured motion (visual ego-motion or
odometry) and the observation from a colour-region summary, so the pipeline runs with no weights.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import numpy as np

from embodied_r_ros.core.actions import Motion, action_of
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import ChatBackend, Completion, Conversation, raise_if_stopped
from embodied_r_ros.core.colors import colour_objects
from embodied_r_ros.core.config import CameraConfig, ModelConfig, PerceptionConfig
from embodied_r_ros.core.egomotion import camera_matrix
from embodied_r_ros.core.grounding import (
    GroundingError,
    asking_boxes,
    configured_grid,
    grounded_objects,
    grounding_conversation,
    model_image_size,
    split_boxes,
)
from embodied_r_ros.core.perception_text import observation, render
from embodied_r_ros.core.prompts import PromptSet, default_prompts
from embodied_r_ros.core.records import (
    FrameRecord,
    MotionSource,
    PerceptionRecord,
    SeenObject,
    TextStyle,
)

log = logging.getLogger(__name__)

#: how a VLM reply is read: ``robust`` (:func:`parse_reply`, robots) or ``official``
#: (:func:`parse_reply_official`, the paper route and benchmark imports)
ReplyReading = Literal["robust", "official"]

# "1." / "1)" / "(1)" / "1:" / "**1.**" / "Item 1:" at the start of a line.
_ITEM_RE = re.compile(
    r"^[ \t>*_#-]*(?:item\s*)?\(?([1-3])\s*[.):]\)?[*_]*[ \t]*", re.IGNORECASE | re.MULTILINE
)
_LABEL_RE = re.compile(
    r"^\s*(?:\*\*)?(?:the\s+)?(?:action(?:\s+performed)?|new spatial information|objects?"
    r"(?: mentioned)?(?: in the question)?)\s*(?:\*\*)?\s*[:\-]\s*(?:\*\*)?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class FrameReply:
    """A VLM reply split into the action it named and what it observed."""

    action: str | None
    observation: str


def parse_reply(reply: str, first: bool = False) -> FrameReply:
    """Split a VLM reply into ``{action, observation}``.

    Frame 0's whole reply is the observation. Later frames: items 1..3 in any common numbering
    style; item 1 is the action (kept as text even when outside the vocabulary), items 2 and 3
    are the observation. A reply without numbered items keeps all text as the observation and a
    vocabulary action found at its start as the action.
    """
    text = reply.strip()
    if first:
        return FrameReply(None, _squash(text))
    marks = list(_ITEM_RE.finditer(text))
    items: dict[int, str] = {}
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        number = int(mark.group(1))
        if number not in items:
            items[number] = _LABEL_RE.sub("", text[mark.end() : end].strip(), count=1).strip()
    if 1 in items and (2 in items or 3 in items):
        raw_action = items[1].splitlines()[0].strip(" .*") if items[1] else ""
        action = action_of(raw_action) or (raw_action or None)
        view = " ".join(items[n] for n in (2, 3) if items.get(n))
        return FrameReply(action, _squash(view))
    return FrameReply(action_of(text), _squash(text))


_OFFICIAL_ITEMS = (
    re.compile(r"(?:###\s*1\.|1\.)(.*?)(?=\n\s*(?:###\s*2\.|2\.))", re.DOTALL),
    re.compile(r"(?:###\s*2\.|2\.)(.*?)(?=\n\s*(?:###\s*3\.|3\.))", re.DOTALL),
    re.compile(r"(?:###\s*3\.|3\.)(.*)", re.DOTALL),
)


def parse_reply_official(reply: str, first: bool = False) -> FrameReply:
    """A VLM reply read as the official code reads it (``split_points`` in
    train/conver_format/VLM_perception_*.py of Embodied-R.code): frame 0 and any reply without
    all of "1.", "2." and "3." keep the whole reply as the view and no action ("After None");
    otherwise item 1 (stripped, verbatim: not matched to the vocabulary) is the action and
    items 2 and 3 joined by a space the view. Whitespace is kept as the VLM wrote it."""
    if first or not all(mark in reply for mark in ("1.", "2.", "3.")):
        return FrameReply(None, reply)
    found = [m.search(reply) for m in _OFFICIAL_ITEMS]
    action, view, objects = (m.group(1).strip() if m else None for m in found)
    if objects is None:
        return FrameReply(action, str(view))  # "None" when item 2 is missing too, as printed
    if view is None:
        return FrameReply(None, reply)  # the official join fails and falls back to the reply
    return FrameReply(action, f"{view} {objects}")


def read_reply(reply: str, first: bool, reading: ReplyReading = "robust") -> FrameReply:
    """A reply read the configured way (``perception.reply_reading``)."""
    return (parse_reply_official if reading == "official" else parse_reply)(reply, first)


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@dataclass(frozen=True)
class PerceptionResult:
    """The records of a question's key frames, and the text rendered from them."""

    record: PerceptionRecord
    text: str  # the full LM user message
    from_cache: bool = False  # no VLM call was made
    vlm_calls: int = 0  # calls made for this result (the rest came from the cache)

    @property
    def frames(self) -> tuple[FrameRecord, ...]:
        return self.record.frames


def vlm_conversation(
    index: int,
    images: Sequence[np.ndarray],
    question_block: str | None,
    prompts: PromptSet | None = None,
) -> Conversation:
    """The VLM request for key frame ``index``: one image for frame 0, else (previous, current).

    ``question_block=None`` asks the question-agnostic (streaming) prompts.
    """
    p = prompts or default_prompts()
    if index == 0:
        parts = [
            {"type": "image", "image": images[0]},
            {"type": "text", "text": p.first_frame_prompt(question_block)},
        ]
    else:
        parts = [
            {"type": "image", "image": images[index - 1]},
            {"type": "image", "image": images[index]},
            {"type": "text", "text": p.pair_prompt(question_block)},
        ]
    return [{"role": "user", "content": parts}]


def digest(*parts: bytes | str) -> str:
    """A stable hex key over byte/str parts (length-prefixed so parts cannot run together)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def frames_digest(images: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for img in images:
        arr = np.ascontiguousarray(img)
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


ProgressFn = Callable[[str, int, int, str], None]


def reply_settings(vlm: ModelConfig | None) -> list[Any]:
    """The VLM generation settings that change a reply (empty without a VLM): the one list
    the reply cache keys and the dataset build journal fingerprint by."""
    if vlm is None:
        return []
    settings: list[Any] = [vlm.temperature, vlm.top_p, vlm.max_new_tokens, vlm.image_max_side,
                           vlm.seed]
    chosen = [vlm.top_k, vlm.repetition_penalty, vlm.generation_from_checkpoint]
    # keyed only when chosen, so replies cached before these settings existed stay valid
    return settings + chosen if chosen != [0, 1.0, False] else settings


class ReplyStore(Protocol):
    """Where replies are kept by key (the backends' ``ReplyCache``), handed to the method."""

    def get(self, key: str) -> Any | None: ...
    def put(self, key: str, value: Any) -> None: ...


class Perceiver:
    """Describes key frames with a VLM (or geometrically), caching every reply per call."""

    def __init__(
        self,
        cfg: PerceptionConfig,
        vlm: ChatBackend | None = None,
        cache: ReplyStore | None = None,
        prompts: PromptSet | None = None,
    ) -> None:
        if cfg.backend == "vlm" and vlm is None:
            raise ValueError("perception backend 'vlm' needs a VLM backend")
        self.cfg = cfg
        self.vlm = vlm if cfg.backend == "vlm" else None
        self.cache = cache
        self.prompts = prompts or default_prompts()
        #: the live camera's intrinsics (a node's ``camera_info``): grounding's where a call
        #: names none; None: ``cfg.camera``
        self.camera: CameraConfig | None = None

    @property
    def model_id(self) -> str:
        return self.vlm.model_id if self.vlm is not None else "geometric"

    @property
    def streaming(self) -> bool:
        return self.cfg.mode == "streaming"

    def _settings(self) -> str:
        """The generation settings that change a reply, as one stable string."""
        settings = reply_settings(self.cfg.vlm)
        return json.dumps(settings, sort_keys=True) if settings else ""

    def call_key(self, conversation: Conversation) -> str:
        """The cache key of one VLM call: its images, prompt, model, prompt version, settings."""
        parts = conversation[0]["content"]
        images = [p["image"] for p in parts if p["type"] == "image"]
        text = "".join(p["text"] for p in parts if p["type"] == "text")
        return digest(
            frames_digest(images), text, self.model_id, self.prompts.version, self._settings()
        )

    @property
    def grounding(self) -> str:
        """How objects are grounded (``perception.grounding.mode``; ``off`` without a VLM)."""
        return self.cfg.grounding.mode if self.vlm is not None else "off"

    def _call(self, index: int, images: Sequence[np.ndarray], block: str | None
              ) -> Conversation:
        """Key frame ``index``'s perception call, asking for boxes too in ``reply`` mode."""
        call = vlm_conversation(index, images, block, self.prompts)
        if self.grounding != "reply":
            return call
        return asking_boxes(call, block is None, self.prompts, self.cfg.grounding.max_objects)

    def conversations(
        self, images: Sequence[np.ndarray], question_block: str
    ) -> list[Conversation]:
        """One VLM call per key frame (question-agnostic in streaming mode)."""
        block = None if self.streaming else question_block
        return [self._call(i, images, block) for i in range(len(images))]

    def grounding_calls(
        self, images: Sequence[np.ndarray], question_block: str | None
    ) -> list[Conversation]:
        """``request`` mode's grounding calls, one per key frame alone (none otherwise)."""
        if self.grounding != "request":
            return []
        block = None if self.streaming else question_block
        return [grounding_conversation(image, block, self.prompts, self.cfg.grounding.max_objects)
                for image in images]

    def _split(self, reply: str) -> tuple[str, str | None]:
        """A perception reply's text, and its boxes' JSON in ``reply`` mode (else None)."""
        return split_boxes(reply) if self.grounding == "reply" else (reply, None)

    def _objects(self, boxes: str | None, image: np.ndarray, camera: CameraConfig | None,
                 stamp: float) -> tuple[SeenObject, ...]:
        """The objects of one key frame's grounding reply (``boxes``; None: there is none).
        A bad reply costs the frame's objects and one warning line, never the frame."""
        assert self.vlm is not None
        g = self.cfg.grounding
        height, width = image.shape[:2]
        try:
            if boxes is None:
                raise GroundingError("the reply has no JSON list of boxes")
            grid = self.vlm.image_grid or configured_grid(g)
            max_side = self.cfg.vlm.image_max_side if self.cfg.vlm is not None else 0
            k = camera_matrix(camera or self.camera or self.cfg.camera, width, height)
            return grounded_objects(boxes, (width, height),
                                    model_image_size(width, height, max_side, grid), k,
                                    g.max_objects)
        except GroundingError as exc:
            log.warning("key frame at %.3f s: its grounded objects are dropped: %s", stamp, exc)
            return ()

    def cached_replies(self, calls: Sequence[Conversation]) -> tuple[list[str], list[str | None]]:
        """The cache keys of ``calls`` and the replies already cached (None where missing)."""
        keys = [self.call_key(c) for c in calls]
        replies: list[str | None] = []
        for key in keys:
            hit = self.cache.get(key) if self.cache is not None else None
            replies.append(hit if isinstance(hit, str) else None)
        return keys, replies

    def _vlm_replies(
        self,
        images: Sequence[np.ndarray],
        question_block: str,
        on_progress: ProgressFn | None,
        cancel: CancelToken | None,
    ) -> tuple[list[str], int]:
        """Every key frame's reply in frame order, then (``request`` mode) every key frame's
        grounding reply, and how many VLM calls were made.

        Missing replies are requested together (``concurrency`` at a time, 0 = all); each is
        cached as it arrives, so a failed or cancelled question keeps the replies it got.
        Progress counts the perception calls.
        """
        assert self.vlm is not None
        calls = self.conversations(images, question_block)
        total = len(calls)
        calls += self.grounding_calls(images, question_block)
        keys, replies = self.cached_replies(calls)
        missing = [i for i, r in enumerate(replies) if r is None]
        done = sum(r is not None for r in replies[:total])
        if on_progress and done:
            on_progress("perception", done, total, "")
        step = self.cfg.concurrency or len(missing) or 1
        for start in range(0, len(missing), step):
            chunk = missing[start : start + step]

            def arrived(j: int, completion: Completion, chunk: list[int] = chunk) -> None:
                nonlocal done
                i = chunk[j]
                replies[i] = completion.text
                if self.cache is not None:
                    self.cache.put(keys[i], completion.text)
                if i < total:
                    done += 1
                    if on_progress:
                        on_progress("perception", done, total, completion.text)

            self.vlm.complete([calls[i] for i in chunk], cancel=cancel, on_reply=arrived)
        return [r or "" for r in replies], len(missing)

    def prefetch(
        self,
        previous: np.ndarray | None,
        current: np.ndarray,
        cancel: CancelToken | None = None,
        *,
        alone: bool = True,
        stamp: float = 0.0,
        camera: CameraConfig | None = None,
    ) -> FrameRecord:
        """Describe a frame question-agnostically, alone (for a window that starts at it) and
        after ``previous`` (for one that goes on through it), into the cache: what streaming
        perception does in the background. Returns the record of the pair (of the frame alone
        for the first of a stream), with the objects grounded in the frame where grounding is
        on (``camera``: its intrinsics). Without a VLM: the frame's colour regions and no
        action (the motion is measured), nothing cached."""
        if self.vlm is None:
            return FrameRecord(stamp, objects=colour_objects(current))
        calls = [self._call(0, [current], None)] if alone else []
        if previous is not None:
            calls.append(self._call(1, [previous, current], None))
        described = len(calls)
        calls += self.grounding_calls([current], None)
        keys, replies = self.cached_replies(calls)
        missing = [i for i, r in enumerate(replies) if r is None]
        if missing:
            got = self.vlm.complete([calls[i] for i in missing], cancel=cancel)
            for i, completion in zip(missing, got, strict=True):
                replies[i] = completion.text
                if self.cache is not None:
                    self.cache.put(keys[i], completion.text)
        text, boxes = self._split(replies[described - 1] or "")
        reply = read_reply(text, previous is None, self.cfg.reply_reading)
        if self.grounding == "request":
            boxes = replies[-1] or ""
        objects = self._objects(boxes, current, camera, stamp) if self.grounding != "off" else ()
        return FrameRecord(stamp, vlm_action=reply.action, vlm_text=reply.observation,
                           objects=objects)

    @property
    def style(self) -> TextStyle:
        """How this perception's records are written for the LM."""
        return TextStyle(self.cfg.frame_layout, self.cfg.report_motion)

    def describe(
        self,
        images: Sequence[np.ndarray],
        stamps: Sequence[float],
        question_block: str,
        motions: Sequence[Motion | None] | None = None,
        *,
        motion_source: MotionSource | Sequence[MotionSource] = "visual",
        on_progress: ProgressFn | None = None,
        cancel: CancelToken | None = None,
        question: str = "",
        options: Sequence[str] = (),
        camera: CameraConfig | None = None,
    ) -> PerceptionResult:
        """Perceive key frames; ``motions[i]`` is the motion from frame i to i+1, measured by
        ``motion_source`` (one source for all, or one per motion); ``question`` and
        ``options``: what ``question_block`` words (kept in the record for its readers);
        ``camera``: the intrinsics grounded objects are placed with (else the live camera's,
        else the config's). Raises ``BackendError`` (``CANCELLED`` / ``BACKEND_TIMEOUT`` when
        ``cancel`` stops it)."""
        if len(images) != len(stamps):
            raise ValueError("images and stamps differ in length")
        if motions is not None and len(motions) != max(len(images) - 1, 0):
            raise ValueError("motions must have one entry per consecutive key-frame pair")
        motions = list(motions or [])
        motions += [None] * (max(len(images) - 1, 0) - len(motions))
        if isinstance(motion_source, str):
            sources: list[MotionSource] = [motion_source] * len(motions)
        else:
            if len(motion_source) != len(motions):
                raise ValueError("motion_source must name one source per motion")
            sources = list(motion_source)
        measured: list[tuple[Motion | None, MotionSource | None]] = [(None, None)] + [
            (m, src if m is not None else None) for m, src in zip(motions, sources, strict=True)]
        calls = 0
        if self.vlm is not None:
            replies, calls = self._vlm_replies(images, question_block, on_progress, cancel)
            grounding = replies[len(images):]  # request mode's replies
            frames = []
            for i, reply in enumerate(replies[: len(images)]):
                text, boxes = self._split(reply)
                got = read_reply(text, i == 0, self.cfg.reply_reading)
                motion, source = measured[i]
                objects = () if self.grounding == "off" else self._objects(
                    grounding[i] if grounding else boxes, images[i], camera, float(stamps[i]))
                frames.append(FrameRecord(float(stamps[i]), motion=motion, motion_source=source,
                                          vlm_action=got.action if i else None,
                                          vlm_text=got.observation, objects=objects))
        else:
            frames = []
            for i, img in enumerate(images):
                raise_if_stopped(cancel)
                motion, source = measured[i]
                frames.append(FrameRecord(float(stamps[i]), motion=motion, motion_source=source,
                                          objects=colour_objects(img)))
                if on_progress:
                    on_progress("perception", i + 1, len(images), observation(frames[-1]))
        record = PerceptionRecord(tuple(frames), question, tuple(options), question_block,
                                  self.style)
        return PerceptionResult(record, render(record, self.prompts),
                                from_cache=self.vlm is not None and calls == 0, vlm_calls=calls)


def with_poses(result: PerceptionResult, poses: Sequence[Any]) -> PerceptionResult:
    """``result`` with the camera pose of each key frame where one was known."""
    frames = tuple(replace(f, pose=p, pose_source="odometry" if p is not None else None)
                   for f, p in zip(result.frames, poses, strict=True))
    return replace(result, record=replace(result.record, frames=frames))
