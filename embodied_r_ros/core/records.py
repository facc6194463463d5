"""The typed perception record: what perception found in each key frame, before any prose.

Perception (a VLM, or the geometric stand-in), the memory and the datasets all pass these
records; the text the reasoning LM reads is rendered from them once, at the LM boundary
(:mod:`embodied_r_ros.core.perception_text`), and never parsed back. A record keeps values as
measured (a pose, a motion in metres and degrees, an object's bearing); how the text rounds
them is the renderer's business, so readers that must see exactly what the LM sees ask the
renderer for its stated view.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.poses import Pose

#: where a measured motion (or a pose) came from
MotionSource = Literal["odometry", "visual"]
#: how the robot route writes its frame lines (``perception.frame_layout``)
FrameLayout = Literal["timed", "paper"]


@dataclass(frozen=True)
class SeenObject:
    """One object a key frame shows: the geometric perception's colour region, or an object a
    VLM named. Geometry is in the camera's view: ``bearing_deg`` left > 0 from the optical
    axis, ``distance_m`` along the floor where known, ``box`` in the camera image's pixels
    ``(x1, y1, x2, y2)``."""

    name: str
    colour: str | None = None
    size: str | None = None  # small / medium / large by image share
    direction: str | None = None  # the coarse words: "to the left, below"
    bearing_deg: float | None = None
    distance_m: float | None = None
    box: tuple[float, float, float, float] | None = None
    confidence: float | None = None
    attributes: tuple[str, ...] = ()
    #: apparent width, degrees of the view the object spans (from its box)
    extent_deg: float | None = None
    #: the angle of its box's bottom edge below the optical axis (degrees, down > 0; None
    #: where the box reaches the image's bottom edge): with the camera's height and pitch,
    #: the floor distance of its foot
    foot_deg: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, ())}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SeenObject:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("box") is not None:
            values["box"] = tuple(float(v) for v in values["box"])
        values["attributes"] = tuple(values.get("attributes") or ())
        return cls(**values)


@dataclass(frozen=True)
class FrameRecord:
    """What perception says of one key frame.

    ``motion`` is the measured motion from the previous key frame of the list the record is
    in (None: none was measured), by ``motion_source``; ``pose`` the camera pose where one was
    known. ``vlm_text`` is the VLM's own observation where a VLM described the frame (None for
    the geometric perception, whose observation is its ``objects``); ``vlm_action`` the action
    the VLM named after the previous key frame.
    """

    stamp: float
    pose: Pose | None = None
    pose_source: MotionSource | None = None
    motion: Motion | None = None
    motion_source: MotionSource | None = None
    vlm_action: str | None = None
    vlm_text: str | None = None
    objects: tuple[SeenObject, ...] = field(default=())

    @property
    def described_by_vlm(self) -> bool:
        return self.vlm_text is not None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stamp": self.stamp}
        if self.pose is not None:
            out["pose"] = asdict(self.pose)
            out["pose_source"] = self.pose_source
        if self.motion is not None:
            out["motion"] = asdict(self.motion)
            out["motion_source"] = self.motion_source
        for key in ("vlm_action", "vlm_text"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.objects:
            out["objects"] = [o.to_dict() for o in self.objects]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FrameRecord:
        pose, motion = data.get("pose"), data.get("motion")
        return cls(
            stamp=float(data["stamp"]),
            pose=Pose(**pose) if pose else None,
            pose_source=data.get("pose_source") if pose else None,
            motion=Motion(**motion) if motion else None,
            motion_source=data.get("motion_source") if motion else None,
            vlm_action=data.get("vlm_action"),
            vlm_text=data.get("vlm_text"),
            objects=tuple(SeenObject.from_dict(o) for o in data.get("objects") or ()),
        )


@dataclass(frozen=True)
class TextStyle:
    """How a list of records is written for the LM: the frame-line layout, whether measured
    motion is reported (the robot route) or only the VLM's action (the official route), and
    what a frame with no known motion says (None: ``None`` after a VLM's frame, as the official
    code prints it, else ``an unknown motion``)."""

    layout: FrameLayout = "timed"
    report_motion: bool = True
    unknown_motion: str | None = None


@dataclass(frozen=True)
class ObjectPlace:
    """Where one object a question names is, as a memory places it: its ``name`` (a colour
    region's "red object", a VLM's label), the newest age of each visit (newest first) and of
    the last sighting, where it is now from the robot (``now``: distance in metres and bearing
    in degrees, left > 0; None: no place), whether bearings crossed to place it (else it is
    guessed along one), how far off that place may be (``uncertainty_m``; None: not said), the
    spot it was last seen from (distance, bearing now; None: unknown), and the nearest other
    named objects (a colour region by its colour, a labelled object by its label)."""

    name: str
    visits_s: tuple[float, ...]
    last_s: float
    now: tuple[float, float] | None = None
    triangulated: bool = True
    seen_from: tuple[float, float] | None = None
    nearby: tuple[tuple[str, float], ...] = ()
    #: the colour of a colour region (None for a labelled object)
    colour: str | None = None
    uncertainty_m: float | None = None


@dataclass(frozen=True)
class ColourNote:
    """A colour (or a label's word) only the options name: when a frame last showed it (None:
    none did)."""

    colour: str
    last_seen_s: float | None = None


PlaceNote = ObjectPlace | ColourNote


def _pair(value: Any) -> tuple[float, float] | None:
    return (float(value[0]), float(value[1])) if value else None


def _note_from_dict(data: Mapping[str, Any]) -> PlaceNote:
    if "visits_s" not in data:
        return ColourNote(data["colour"], data.get("last_seen_s"))
    # a note written before labels names its colour only
    name = data.get("name") or f"{data['colour']} object"
    return ObjectPlace(
        name=name, visits_s=tuple(data["visits_s"]), last_s=data["last_s"],
        now=_pair(data.get("now")), triangulated=bool(data.get("triangulated", True)),
        seen_from=_pair(data.get("seen_from")),
        nearby=tuple((str(c), float(d)) for c, d in data.get("nearby") or ()),
        colour=data.get("colour"), uncertainty_m=data.get("uncertainty_m"))


@dataclass(frozen=True)
class PerceptionRecord:
    """Everything the reasoning LM's user message is rendered from: the key frames, the
    question (its block as the benchmark words it, and its options), how to write them, and
    what a memory places after the frames (``places``; None: no places block)."""

    frames: tuple[FrameRecord, ...]
    question: str
    options: tuple[str, ...]
    question_block: str
    style: TextStyle = TextStyle()
    places: tuple[PlaceNote, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as a dataset row keeps it (``records``; the question is the row's)."""
        out: dict[str, Any] = {"frames": [f.to_dict() for f in self.frames],
                               "style": asdict(self.style)}
        if self.places is not None:
            out["places"] = [asdict(n) for n in self.places]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], question: str, options: Sequence[str],
                  question_block: str) -> PerceptionRecord:
        places = data.get("places")
        return cls(frames=frames_from_dicts(data["frames"]), question=question,
                   options=tuple(options), question_block=question_block,
                   style=TextStyle(**data.get("style", {})),
                   places=None if places is None else tuple(_note_from_dict(n) for n in places))


def frames_from_dicts(items: Sequence[Mapping[str, Any]]) -> tuple[FrameRecord, ...]:
    return tuple(FrameRecord.from_dict(d) for d in items)
