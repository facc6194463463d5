"""Which key frames of hours of memory a question is answered from.

The reasoner reads at most the key-frame budget (``keyframes.max_frames``), so a question
picks its frames from the whole memory, in this order of priority:

1. the **latest** frames (``memory.latest``), always: the last selected frame is "now", so
   "where is X relative to me now" stays answerable from the motions the text states;
2. frames inside each **time range** the question or its options name ("10 minutes ago",
   "at the start"; :mod:`~embodied_r_ros.memory.time_phrases`), those matching its objects
   first, the rest spread evenly over the range; a range with nothing stored takes the frames
   nearest to it;
3. frames whose description or objects match the question's **objects and attributes**
   (full-text search), one per visit (a run of matches), newest visit first, then a second
   view of each visit, the farthest in time from the first;
4. frames whose description is **similar** to the question (the embedder, where installed);
5. the most recent frames, until the budget is full (a question with no cue reads the last
   key frames, as the window does).

The selection also carries the memory's placements (this robot's, or with
``share_placements`` every robot's of the store), from which its text says where the named
objects are now.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from embodied_r_ros.core.config import KEY_FRAME_BUDGET, LATEST_FRAMES
from embodied_r_ros.core.perception_text import FrameLayout
from embodied_r_ros.core.poses import StampedPose
from embodied_r_ros.core.records import PerceptionRecord
from embodied_r_ros.memory.embedder import TextEmbedder
from embodied_r_ros.memory.labels import LabelMatcher
from embodied_r_ros.memory.placements import Placement
from embodied_r_ros.memory.query_terms import question_terms
from embodied_r_ros.memory.store import MemoryRow, MemoryStore, TextHit
from embodied_r_ros.memory.text import memory_record
from embodied_r_ros.memory.time_phrases import TimeRange, parse_time_phrases
from embodied_r_ros.memory.vectors import VectorIndex

log = logging.getLogger(__name__)

#: matches closer in time than this belong to one visit of the same object
VISIT_GAP_S = 30.0
#: frames the nearest-to-an-empty-range fallback takes
_NEAREST = 4


@dataclass(frozen=True)
class Selection:
    """The frames chosen for a question, oldest first, and why each was chosen."""

    rows: list[MemoryRow]
    #: row id -> the reasons ("latest", "time:10 minutes ago", "text", "similar", "recent")
    reasons: dict[int, tuple[str, ...]]
    ranges: list[TimeRange] = field(default_factory=list)
    terms: list[str] = field(default_factory=list)
    #: adjacent[i]: rows[i] was stored right after rows[i - 1] (same camera)
    adjacent: list[bool] = field(default_factory=list)
    #: what a person should know (a range with nothing stored in it, an empty memory)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: the memory's placements when the frames were selected (None: place from the rows)
    placements: list[Placement] | None = None
    matcher: LabelMatcher | None = None

    def record(self, question: str, options: Sequence[str], question_block: str,
               layout: FrameLayout = "timed", live: StampedPose | None = None
               ) -> PerceptionRecord:
        """The record the reasoner's user message is rendered from, from these frames, its
        places counted from ``live`` (the robot's pose at the ask) where given."""
        return memory_record(self.rows, question, options, question_block, layout,
                             self.adjacent, self.placements, self.matcher, live)


class _Picker:
    """Chosen ids in order of priority, with their reasons, up to the budget."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.reasons: dict[int, list[str]] = {}

    @property
    def room(self) -> int:
        return self.budget - len(self.reasons)

    def add(self, ids: Iterable[int], reason: str, limit: int | None = None) -> int:
        added = 0
        for i in ids:
            if i in self.reasons:
                if reason not in self.reasons[i]:
                    self.reasons[i].append(reason)
                continue
            if self.room <= 0 or (limit is not None and added >= limit):
                break
            self.reasons[i] = [reason]
            added += 1
        return added


def spread(items: Sequence[tuple[int, float]], n: int) -> list[int]:
    """Ids of ``n`` of ``items`` (sorted by stamp) evenly spaced in order, ends included."""
    if n <= 0 or not items:
        return []
    if n >= len(items):
        return [i for i, _ in items]
    picks = np.unique(np.round(np.linspace(0, len(items) - 1, n)).astype(int))
    return [items[k][0] for k in picks]


def by_visit(hits: Sequence[TextHit], gap_s: float = VISIT_GAP_S) -> list[int]:
    """Hit ids ordered for picking: the best hit of each visit (hits less than ``gap_s``
    apart), newest visit first, then each visit's second pick, and so on. A visit's second
    pick is its hit farthest in time from the best one: two views of an object from places
    apart locate it (their bearings cross), where two adjacent frames barely differ."""
    visits: list[list[TextHit]] = []
    for hit in sorted(hits, key=lambda h: h.stamp):
        if visits and hit.stamp - visits[-1][-1].stamp <= gap_s:
            visits[-1].append(hit)
        else:
            visits.append([hit])
    ranked = [_visit_order(v) for v in reversed(visits)]
    out: list[int] = []
    for depth in range(max((len(v) for v in ranked), default=0)):
        out += [v[depth].id for v in ranked if depth < len(v)]
    return out


def _visit_order(visit: Sequence[TextHit]) -> list[TextHit]:
    """The best hit, the one farthest in time from it (the better of two as far), the rest by
    score."""
    ranked = sorted(visit, key=lambda h: -h.score)
    if len(ranked) < 3:
        return ranked
    best = ranked[0]
    far = max(ranked[1:], key=lambda h: (abs(h.stamp - best.stamp), h.score))
    return [best, far, *(h for h in ranked[1:] if h is not far)]


class Retriever:
    """Selects a question's frames from one store (see the module notes); one per reader
    thread. ``embedder``: None for full-text search alone."""

    def __init__(self, store: MemoryStore, *, budget: int = KEY_FRAME_BUDGET,
                 latest: int = LATEST_FRAMES,
                 embedder: TextEmbedder | None = None, text_hits: int = 400,
                 share_placements: bool = False) -> None:
        if budget < 2 or not 1 <= latest < budget:
            raise ValueError("the budget needs at least 2 frames and latest 1 to budget - 1")
        self.store = store
        self.budget = budget
        self.latest = latest
        self.embedder = embedder
        self.text_hits = text_hits
        self.share_placements = share_placements
        self.matcher = LabelMatcher(embedder)
        self._indexes: dict[str, VectorIndex] = {}

    def select(self, robot: str, question: str, options: Sequence[str] = (),
               now: float | None = None) -> Selection:
        """At most ``budget`` frames of ``robot`` for ``question`` and its ``options``, oldest
        first. ``now``: the time "10 minutes ago" counts from (default: the newest frame).
        Raises :class:`SpatialMemoryError` (``BAD_TIME_PHRASE`` for a time phrase that cannot
        be read, or a database error)."""
        started = time.perf_counter()
        texts = [question, *options]
        specs = [spec for t in texts for spec in parse_time_phrases(t)]
        plain = [" ".join(t.lower().split()) for t in texts]
        for spec in specs:
            plain = [t.replace(spec.phrase, " ") for t in plain]
        terms = question_terms(plain[0], plain[1:])
        bounds = self.store.bounds(robot)
        if bounds is None:
            return Selection([], {}, terms=terms, notes=[f"the memory of {robot} is empty"],
                             seconds=time.perf_counter() - started)
        first, last = bounds
        now = last if now is None else now
        ranges = [spec.resolve(first, now) for spec in specs]
        picker = _Picker(self.budget)
        picker.add((r.id for r in reversed(self.store.latest(robot, self.latest))
                    if r.id is not None), "latest")
        notes: list[str] = []
        if ranges:
            share = picker.room if not terms else max(picker.room * 2 // 3, len(ranges))
            quota = max(share // len(ranges), 1)
            for r in ranges:
                self._pick_range(picker, robot, r, terms, quota, notes)
        if terms and picker.room > 0:
            vector_room = picker.room // 4 if self.embedder is not None else 0
            hits = self.store.search_text(robot, terms, self.text_hits)
            picker.add(by_visit(hits), "text", limit=picker.room - vector_room)
        if self.embedder is not None and terms and picker.room > 0:
            query = self.embedder.embed([" ".join([question, *options])], remember=False)[0]
            index = self._index(robot)
            picker.add((i for i, _, _ in index.search(query, picker.room * 2)), "similar",
                       limit=picker.room)
        if picker.room > 0:
            recent = self.store.latest(robot, self.budget + self.latest)
            picker.add((r.id for r in reversed(recent) if r.id is not None), "recent")
        rows = self.store.get(list(picker.reasons))
        previous = self.store.previous_ids([r.id for r in rows if r.id is not None])
        adjacent = [i > 0 and previous.get(r.id or -1) == rows[i - 1].id
                    for i, r in enumerate(rows)]
        placements = self.store.placements(None if self.share_placements else [robot])
        return Selection(rows, {i: tuple(v) for i, v in picker.reasons.items()}, ranges, terms,
                         adjacent, notes, time.perf_counter() - started, placements,
                         self.matcher)

    def _pick_range(self, picker: _Picker, robot: str, r: TimeRange, terms: list[str],
                    quota: int, notes: list[str]) -> None:
        reason = f"time:{r.phrase}"
        inside = self.store.stamps(robot, r.start, r.end)
        if not inside:
            near = self.store.nearest(robot, r.centre, _NEAREST)
            notes.append(f'nothing stored for "{r.phrase}"; using the {len(near)} frames '
                         "nearest to it")
            picker.add((i for i, _ in near), reason, limit=quota)
            return
        used = 0
        if terms:
            hits = self.store.search_text(robot, terms, self.text_hits, r.start, r.end)
            used = picker.add(by_visit(hits), f"{reason}+text", limit=quota // 2)
        chosen = set(picker.reasons)
        rest = [(i, s) for i, s in inside if i not in chosen]
        picker.add(spread(rest, quota - used), reason, limit=quota - used)

    def _index(self, robot: str) -> VectorIndex:
        assert self.embedder is not None
        index = self._indexes.get(robot)
        if index is None:
            index = self._indexes[robot] = VectorIndex(self.store, robot, self.embedder.model_id)
        return index
