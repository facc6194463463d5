"""Question-conditioned, sequential VLM perception of key frames, as in Embodied-R.

Frame 0 gets a first-person scene description; every later key frame is sent together with the
previous one, and the VLM names the ego-action (from the paper's ten), the new spatial information
and the question's objects it sees. The replies are parsed robustly and assembled into the text the
reasoning LM reads (``Frame i: After <action>, Observe: <view>``), exactly in the paper's shape.

Without a VLM (``geometric`` backend) the action comes from measured motion (visual ego-motion or
odometry) and the observation from a colour-region summary, so the pipeline runs with no weights.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from embodied_r_ros.core.actions import ACTIONS, Motion, action_of, describe_motion
from embodied_r_ros.core.backends.base import ChatBackend, Conversation
from embodied_r_ros.core.cache import JsonCache, digest
from embodied_r_ros.core.colors import describe_colour_regions
from embodied_r_ros.core.config import PerceptionConfig

log = logging.getLogger(__name__)

PROMPT_VERSION = "embodied-r-v1"

MotionSource = Literal["odometry", "visual"]

_ACTION_LIST = ", ".join(ACTIONS)

FIRST_FRAME_PROMPT = (
    "You are an agent exploring a 3D environment and this image is your current first-person "
    "view. Describe the scene you observe. Characterise objects by their colour and shape. "
    "Stress the spatial relations between you (the agent) and the environment and imagine the "
    "3D space around you; use egocentric terms such as 'to the left', 'ahead-left', 'below' "
    "rather than positions in the image. More importantly, describe any objects mentioned in "
    "the following question. Do not answer the question and do not choose an option.\n"
    "{question}\nBe concise."
)

PAIR_PROMPT = (
    "You are an agent moving in a 3D environment. The first image is your first-person view "
    "before an action and the second image is your view after it. Answer with three numbered "
    "items:\n"
    "1. The action you performed, inferred from the relative positional changes of objects "
    f"between the two views. Choose exactly one of: {_ACTION_LIST}. Output only that phrase.\n"
    "2. The new spatial information in the view after the action compared with the view before "
    "it, such as objects that were invisible or unclear before. Note colour and shape to tell "
    "repeated objects apart, focus on the relations between you and the environment, imagine "
    "the 3D scene, and use egocentric relative terms.\n"
    "3. The objects mentioned in the following question that appear in the images. Do not "
    "answer the question and do not choose an option.\n"
    "{question}\nBe concise."
)

PREAMBLE = (
    "The video is described in text, one key frame at a time. Frame 0 is your initial "
    "position. You keep moving and receive new frames; the last frame is your current "
    "position."
)

LM_INSTRUCTION = (
    "Assume you are an agent and the video content below is your egocentric observation from "
    "the past to the present. Answer the question based on it."
)

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


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@dataclass(frozen=True)
class FrameDescription:
    """What perception says of one key frame."""

    stamp: float
    action: str | None  # the action written into the LM text (None for frame 0)
    observation: str
    vlm_action: str | None = None
    measured_motion: str | None = None  # e.g. "rotate left, about 30 degrees"
    motion_source: MotionSource | None = None  # where measured_motion came from


@dataclass(frozen=True)
class PerceptionResult:
    frames: list[FrameDescription]
    text: str  # the full LM user message
    from_cache: bool = False


def primary_action(
    vlm_action: str | None, measured: str | None, source: MotionSource | None
) -> str | None:
    """The action the LM reads: odometry beats the VLM, the VLM beats visual ego-motion.

    Odometry is a measurement of the robot itself; visual ego-motion is only reported beside
    the VLM's action, and stands in for it when the VLM named none (or there is no VLM).
    """
    if source == "odometry" and measured:
        return measured
    return vlm_action or measured


def frame_line(index: int, desc: FrameDescription, report_motion: bool = True) -> str:
    if index == 0:
        return f"Frame 0: Observe: {desc.observation}"
    action = desc.action or "None"
    if report_motion and desc.measured_motion and desc.vlm_action:
        if desc.motion_source == "odometry":
            action = f"{desc.measured_motion} (VLM: {desc.vlm_action})"
        else:
            action = f"{desc.vlm_action} (measured: {desc.measured_motion})"
    return f"Frame {index}: After {action}, Observe: {desc.observation}"


def assemble(
    frames: Sequence[FrameDescription], question_block: str, report_motion: bool = True
) -> str:
    """The reasoning LM's user message in the paper's shape (digest §1.3)."""
    lines = "\n".join(frame_line(i, f, report_motion) for i, f in enumerate(frames))
    return (
        f"{LM_INSTRUCTION}\nVideo content:\n<\n{PREAMBLE}\n{lines}\n>\n{question_block}"
    )


def frame_prompts(question_block: str) -> tuple[str, str]:
    return (
        FIRST_FRAME_PROMPT.format(question=question_block),
        PAIR_PROMPT.format(question=question_block),
    )


def vlm_conversation(
    index: int, images: Sequence[np.ndarray], question_block: str
) -> Conversation:
    """The VLM request for key frame ``index``: one image for frame 0, else (previous, current)."""
    first_prompt, pair_prompt = frame_prompts(question_block)
    if index == 0:
        parts = [{"type": "image", "image": images[0]}, {"type": "text", "text": first_prompt}]
    else:
        parts = [
            {"type": "image", "image": images[index - 1]},
            {"type": "image", "image": images[index]},
            {"type": "text", "text": pair_prompt},
        ]
    return [{"role": "user", "content": parts}]


def frames_digest(images: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for img in images:
        arr = np.ascontiguousarray(img)
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


class PerceptionCancelled(Exception):
    """Raised between VLM calls when the caller asked to stop."""


ProgressFn = Callable[[str, int, int, str], None]


class Perceiver:
    """Describes key frames with a VLM (or geometrically) and caches the VLM's replies."""

    def __init__(
        self,
        cfg: PerceptionConfig,
        vlm: ChatBackend | None = None,
        cache: JsonCache | None = None,
    ) -> None:
        if cfg.backend == "vlm" and vlm is None:
            raise ValueError("perception backend 'vlm' needs a VLM backend")
        self.cfg = cfg
        self.vlm = vlm if cfg.backend == "vlm" else None
        self.cache = cache

    @property
    def model_id(self) -> str:
        return self.vlm.model_id if self.vlm is not None else "geometric"

    def cache_key(self, images: Sequence[np.ndarray], question_block: str) -> str:
        return digest(
            frames_digest(images), question_block, self.model_id, self.cfg.prompt_version
        )

    def _vlm_replies(
        self,
        images: Sequence[np.ndarray],
        question_block: str,
        on_progress: ProgressFn | None,
        cancelled: Callable[[], bool] | None,
    ) -> tuple[list[str], bool]:
        assert self.vlm is not None
        key = self.cache_key(images, question_block)
        if self.cache is not None:
            cached = self.cache.get(key)
            if isinstance(cached, list) and len(cached) == len(images):
                log.debug("perception cache hit %s", key[:12])
                if on_progress:
                    on_progress("perception", len(images), len(images), "")
                return [str(r) for r in cached], True
        replies: list[str] = []
        for i in range(len(images)):
            if cancelled is not None and cancelled():
                raise PerceptionCancelled(f"cancelled after {i} of {len(images)} key frames")
            reply = self.vlm.generate([vlm_conversation(i, images, question_block)])[0]
            replies.append(reply)
            if on_progress:
                on_progress("perception", i + 1, len(images), reply)
        if self.cache is not None:
            self.cache.put(key, replies)
        return replies, False

    def describe(
        self,
        images: Sequence[np.ndarray],
        stamps: Sequence[float],
        question_block: str,
        motions: Sequence[Motion | None] | None = None,
        *,
        motion_source: MotionSource | Sequence[MotionSource] = "visual",
        on_progress: ProgressFn | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> PerceptionResult:
        """Perceive key frames in order; ``motions[i]`` is the motion from frame i to i+1,
        measured by ``motion_source`` (one source for all, or one per motion)."""
        if len(images) != len(stamps):
            raise ValueError("images and stamps differ in length")
        if motions is not None and len(motions) != max(len(images) - 1, 0):
            raise ValueError("motions must have one entry per consecutive key-frame pair")
        measured = [None] + [describe_motion(m) if m else None for m in (motions or [])]
        if len(measured) < len(images):
            measured += [None] * (len(images) - len(measured))
        if isinstance(motion_source, str):
            sources: list[MotionSource | None] = [None] + [motion_source] * (len(images) - 1)
        else:
            if len(motion_source) != len(images) - 1:
                raise ValueError("motion_source must name one source per motion")
            sources = [None, *motion_source]
        sources = [src if m else None for src, m in zip(sources, measured, strict=True)]
        from_cache = False
        if self.vlm is not None:
            replies, from_cache = self._vlm_replies(images, question_block, on_progress, cancelled)
            parsed = [parse_reply(r, first=i == 0) for i, r in enumerate(replies)]
            frames = [
                FrameDescription(
                    stamp=float(stamps[i]),
                    action=primary_action(p.action, measured[i], sources[i]) if i else None,
                    observation=p.observation,
                    vlm_action=p.action if i else None,
                    measured_motion=measured[i],
                    motion_source=sources[i],
                )
                for i, p in enumerate(parsed)
            ]
        else:
            frames = []
            for i, img in enumerate(images):
                if cancelled is not None and cancelled():
                    raise PerceptionCancelled(f"cancelled after {i} of {len(images)} key frames")
                frames.append(
                    FrameDescription(
                        stamp=float(stamps[i]),
                        action=(measured[i] or "an unknown motion") if i else None,
                        observation=describe_colour_regions(img),
                        measured_motion=measured[i],
                        motion_source=sources[i],
                    )
                )
                if on_progress:
                    on_progress("perception", i + 1, len(images), frames[-1].observation)
        text = assemble(frames, question_block, self.cfg.report_motion)
        return PerceptionResult(frames=frames, text=text, from_cache=from_cache)


def description_dicts(result: PerceptionResult) -> list[dict[str, object]]:
    return [asdict(f) for f in result.frames]
