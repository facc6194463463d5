"""Where the memory places the objects its key frames show, from noisy labels and bearings.

Every object a frame's record shows with a bearing (the geometric perception's colour regions,
a VLM's grounded objects alike) is a ray (:mod:`~embodied_r_ros.memory.rays`) in the world
(odometry) frame. A :class:`Placer` associates one robot's rays, frame by frame as the writer
stores them, with :class:`Placement` s, one per object, each keeping the labels its sightings
gave as votes (``votes``, labels the :class:`~embodied_r_ros.memory.labels.LabelMatcher` joins
counted as one) and named by the best-supported one (``label``).

**Association** scores a ray against every placed object in front of its camera: the
log-likelihood of the object's distance from the ray (the ray's range times its bearing error
and the place's own uncertainty, in quadrature: a vague place explains any one ray less well)
plus the log-probability of the ray's label given the object's votes under a confusion prior
(a VLM names an object by another object's name :data:`CONFUSION` of the time, a given wrong
name a :data:`WRONG_NAME` share of that). Beside them stands a *new object* hypothesis of
constant score :data:`NEW_OBJECT_LOG`; the best wins. So a mislabelled ray through a well-seen
chair adds one vote to the chair, while a table's rays a few bearing errors beside it do not
join it: the wrong label costs more than the miss. A measured distance gates it too.

**New objects** (delayed initialisation): a ray that no object explains waits in a pending
pool (:data:`PENDING_S`). An object is made only where at least :data:`MIN_RAYS` pending rays
agree, most of them of one label (the others counted as votes): from at least two camera
positions, crossing at least :data:`~embodied_r_ros.memory.rays.MIN_CROSSING_DEG`, each within
:data:`GATE_SIGMAS` of its bearing error from the crossing, the crossing surer than
:data:`MAX_NEW_UNCERTAINTY_M`. A lone ray without a measured distance is never a place.
**Guesses** (one standpoint): at
least :data:`MIN_GUESS_RAYS` pending rays of one label whose measured floor distances
(:func:`~embodied_r_ros.memory.rays.foot_range`) put the object at one spot place a *guess*
(``triangulated`` False, as sure as the distance); so does a ranged ray with one of its label
without a distance, from another camera position, through the place it measured (seen from
afar, then close up with its foot below the image; a crossing where they cross wide enough).
Labels the matcher does not join but calls near (:meth:`LabelMatcher.near`: a shared colour,
"green pylon" for "green cone"; a shared head noun, a wrong colour) count as one there only
where their rays coincide (two ranged rays, each through the other's place); a ranged ray
anchors rays sharing its colour, not its head noun alone (two wrong names of one shape would
place a third object). A lone ranged ray left alone :data:`LONE_WAIT_S` (no pending ray
through its place, no placement in its gate) places a guess: an object seen once is a guess, not
unplaced; waiting lets its other rays come first (placing at once made twice the placements).
A new object within :data:`RELOCATE_M` of one of its label not seen in
this visit is that object again (odometry drifted): placed again from the new rays, keeping
votes and visits. After each frame, a changed placement within the uncertainty of both of
another's of a near label, never seen in one frame with it, is that object under another name:
the newer is merged into the older (``gone`` to the store).

**Place**: the least-squares crossing of the newest :data:`MAX_RAYS` rays, or of the newest of
them that still cross at one spot (the newest visit states in the odometry frame the robot has
now what drift moved), as sure as :func:`~embodied_r_ros.memory.rays.crossing_uncertainty`.

Method followed and where it differs: the label votes and the best-supported name are
ConceptGraphs' (Gu et al. 2024), which associates by geometry and appearance and drops objects
seen fewer than three times; here geometry and label are scored together and rays, not
detections with depth, are associated. The null hypothesis beside the objects follows Bowman
et al. (ICRA 2017) and Doherty et al. (2019), with a hard decision per ray (no
expectation-maximisation, no max-mixture over past decisions: a ray's decision stands). The
pending pool is delayed bearing-only landmark initialisation (a landmark made once enough
parallax agrees), without a filter state; a guess from two measured distances that agree (or
one and a bearing from elsewhere through its place) stands in for the landmark until parallax
comes. The pool is the writer's alone and is not stored: after a restart, the writer puts the
rays of its newest stored rows that no placement holds back in it (:meth:`Placer.wait`). The
module imports no store.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from embodied_r_ros.core.poses import Pose, crossing_deg
from embodied_r_ros.core.records import FrameRecord, SeenObject
from embodied_r_ros.memory.labels import LabelMatcher, head_word
from embodied_r_ros.memory.rays import (
    ASSUMED_RANGE_M,
    GATE_SIGMAS,
    MIN_CROSSING_DEG,
    MIN_UNCERTAINTY_M,
    RANGE_SHARE,
    SAME_POSE_M,
    SIGMAS,
    Ray,
    coincide,
    crossing_uncertainty,
    guess,
    in_front,
    positions,
    through,
    triangulate,
)
from embodied_r_ros.memory.sightings import frame_rays, is_region, object_key

__all__ = ["ASSUMED_RANGE_M", "Placement", "Placer", "Ray", "frame_rays", "object_key",
           "place_frames"]

#: rays of one object closer in time than this belong to one visit
VISIT_GAP_S = 45.0
#: a VLM names an object by another object's name this share of the time (the confusion prior)
CONFUSION = 0.1
#: the share of those wrong names that is any one name
WRONG_NAME = 0.1
#: the score of the new-object hypothesis: a correctly named object explains a ray up to about
#: 3.4 bearing errors off, a wrongly named one up to about 1.7
NEW_OBJECT_LOG = -6.0
#: pending rays agreeing on a new object: at least this many
MIN_RAYS = 3
#: pending rays with measured distances agreeing on a spot place a guess there: at least this
#: many (a lone ray, mislabelled now and then, places nothing)
MIN_GUESS_RAYS = 2
#: a pending ray with a measured distance left alone this long (seconds) places a guess
LONE_WAIT_S = 20.0
#: a new object's crossing must be at least this sure (metres, as ``uncertainty_m``)
MAX_NEW_UNCERTAINTY_M = 1.5
#: a pending ray waits this long (seconds) for others to agree with it
PENDING_S = 600.0
MAX_PENDING = 512
#: a new object this near an unseen object of its label is that object (odometry drifted)
RELOCATE_M = 1.5
#: rays and visits a placement keeps (the newest): its place follows the newest sightings
MAX_RAYS = 32
MAX_VISITS = 16


@dataclass(frozen=True)
class Placement:
    """One object as the memory places it, in the world frame of the poses it was placed
    from. ``label`` is its best-supported name (``votes``), ``key`` its kind
    (:func:`object_key` of the label), ``colour`` the geometric perception's colour (None for
    a labelled object). ``visits`` are the (first, last) stamps of each visit, oldest first;
    ``seen_from`` where the camera stood when it last saw the object; ``rays`` the newest
    sightings (the writer's: a reader reads placements without them); ``sightings`` how many
    there were in all."""

    id: int
    robot: str
    key: str
    label: str
    colour: str | None
    x: float
    y: float
    uncertainty_m: float
    triangulated: bool
    visits: tuple[tuple[float, float], ...]
    seen_from: tuple[float, float]
    rays: tuple[Ray, ...] = field(default=(), repr=False)
    sightings: int = 1
    #: how many sightings named the object by each label (labels the matcher joins counted as
    #: one), the best-supported first
    votes: tuple[tuple[str, int], ...] = ()

    @property
    def position(self) -> tuple[float, float]:
        return (self.x, self.y)

    @property
    def first(self) -> float:
        return self.visits[0][0]

    @property
    def last(self) -> float:
        return self.visits[-1][1]


def votes_of(p: Placement) -> tuple[tuple[str, int], ...]:
    """``p``'s votes; a placement stored before votes were kept has its label's, one per
    sighting."""
    return p.votes or ((p.label, max(p.sightings, 1)),)


def _visits(stamps: Iterable[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Visits merged where they overlap or lie less than :data:`VISIT_GAP_S` apart."""
    out: list[list[float]] = []
    for a, b in sorted(stamps):
        if out and a - out[-1][1] <= VISIT_GAP_S:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out[-MAX_VISITS:])


@dataclass(frozen=True)
class _Pending:
    label: str
    colour: str | None
    ray: Ray

    @classmethod
    def sighted(cls, obj: SeenObject, ray: Ray) -> _Pending:
        """The sighting of ``obj`` along ``ray``: a colour region keeps its colour."""
        return cls(obj.name, obj.colour if is_region(obj) else None, ray)


def _same_kind(a: _Pending | Placement, b: _Pending | Placement) -> bool:
    """Whether both are colour regions or both labelled objects: the two never mix."""
    return (a.colour is None) == (b.colour is None)


class Placer:
    """One robot's placements, updated frame by frame (see the module notes); ``matcher``
    says which labels are one (None: head nouns alone). Not thread-safe (the memory's one
    writer feeds it)."""

    def __init__(self, robot: str, placements: Iterable[Placement] = (),
                 matcher: LabelMatcher | None = None) -> None:
        self.robot = robot
        self.matcher = matcher or LabelMatcher()
        self.placements: dict[int, Placement] = {p.id: p for p in placements
                                                 if p.robot == robot}
        self.pending: list[_Pending] = []
        self._next = max(self.placements, default=0) + 1

    def add_frame(self, record: FrameRecord, pose: Pose | None
                  ) -> tuple[list[Placement], list[int]]:
        """Place the objects ``record`` shows from ``pose``: the placements changed or
        created, and the ids of those merged into others (gone)."""
        changed: dict[int, Placement] = {}
        self.pending = [e for e in self.pending if record.stamp - e.ray.stamp <= PENDING_S]
        taken: set[int] = set()  # one frame shows an object once
        for obj, ray in frame_rays(record, pose):
            if object_key(obj) is None:
                continue
            seen = _Pending.sighted(obj, ray)
            p = self._associate(seen, taken)
            if p is None:
                p = self._initialise(seen)
            if p is not None:
                taken.add(p.id)
                self.placements[p.id] = p
                changed[p.id] = p
        changed.update((p.id, p) for p in self._lone(record.stamp))
        gone: list[int] = []
        for pid in sorted(changed):  # one object under two names: merged
            p = self.placements.get(pid)
            if p is not None and (twin := self._twin(p)) is not None:
                keep, drop = sorted((p, twin), key=lambda o: o.id)
                self.placements[keep.id] = changed[keep.id] = self._placed(
                    keep, [*keep.rays, *drop.rays], [*keep.visits, *drop.visits],
                    keep.sightings + drop.sightings, self._voted(votes_of(keep), [
                        v for v, n in votes_of(drop) for _ in range(n)]))
                del self.placements[drop.id]
                changed.pop(drop.id, None)
                gone.append(drop.id)
        return list(changed.values()), gone

    def _twin(self, p: Placement) -> Placement | None:
        """The placement that is ``p`` under another name: of a label the matcher calls near,
        within the uncertainty of both, never seen in one frame with it (a frame shows an
        object once). Two objects of one colour stay two unless their places coincide."""
        stamps = {r.stamp for r in p.rays}
        return min((o for o in self.placements.values() if o.id != p.id and o.colour == p.colour
                    and math.dist(o.position, p.position) < min(o.uncertainty_m, p.uncertainty_m)
                    and not stamps & {r.stamp for r in o.rays}
                    and self.matcher.near(o.label, p.label)),
                   key=lambda o: math.dist(o.position, p.position), default=None)

    def wait(self, record: FrameRecord, pose: Pose | None) -> None:
        """Put the rays of an already placed ``record`` that no placement holds back in the
        pending pool (a writer restarting on its stored rows)."""
        held = {(r.stamp, round(r.angle, 5)) for p in self.placements.values() for r in p.rays}
        for obj, ray in frame_rays(record, pose):
            if object_key(obj) is not None and (ray.stamp, round(ray.angle, 5)) not in held:
                self.pending = [*self.pending, _Pending.sighted(obj, ray)][-MAX_PENDING:]

    # -- association -------------------------------------------------------------------------

    def label_odds(self, votes: Sequence[tuple[str, int]], label: str) -> float:
        """How likely an object of ``votes`` is named ``label``: its share of the votes for
        that label, blurred by the confusion prior."""
        total = sum(n for _, n in votes)
        mine = sum(n for v, n in votes if self.matcher.same(v, label))
        share = mine / total if total else 0.0
        return (1.0 - CONFUSION) * share + CONFUSION * WRONG_NAME

    def score(self, p: Placement, label: str, ray: Ray) -> float | None:
        """The log-likelihood that ``p`` is what ``ray`` (named ``label``) saw; None where
        it lies behind the camera, out of range, or more than :data:`GATE_SIGMAS` off the
        ray."""
        if not in_front(p.position, ray):
            return None
        spread = ray.spread(p.position)
        s = math.hypot(spread, p.uncertainty_m / SIGMAS)
        if abs(ray.aside(p.position)) > GATE_SIGMAS * s:
            return None
        if ray.distance_m is not None:  # a measured distance must agree too
            along = math.hypot(RANGE_SHARE * ray.distance_m, p.uncertainty_m / SIGMAS)
            if abs(ray.ahead(p.position) - ray.distance_m) > SIGMAS * along:
                return None
        vague = math.log(s / max(spread, MIN_UNCERTAINTY_M / SIGMAS))
        named = math.log(self.label_odds(votes_of(p), label))
        return -0.5 * (ray.aside(p.position) / s) ** 2 - vague + named

    def _associate(self, seen: _Pending, taken: set[int]) -> Placement | None:
        """The placement sighting ``seen`` joins (placed again with it), None where the
        new-object hypothesis wins."""
        best, best_score = None, NEW_OBJECT_LOG
        for p in self.placements.values():
            if p.id in taken or not _same_kind(p, seen):
                continue
            s = self.score(p, seen.label, seen.ray)
            if s is not None and s > best_score:
                best, best_score = p, s
        if best is None:
            return None
        ray = seen.ray
        return self._placed(best, [*best.rays, ray], [*best.visits, (ray.stamp, ray.stamp)],
                            best.sightings + 1, self._voted(votes_of(best), [seen.label]))

    def _voted(self, votes: Sequence[tuple[str, int]], labels: Iterable[str]
               ) -> tuple[tuple[str, int], ...]:
        out = [list(v) for v in votes]
        for label in labels:
            hit = next((v for v in out if self.matcher.same(str(v[0]), label)), None)
            if hit is None:
                out.append([label, 1])
            else:
                hit[1] = int(hit[1]) + 1
        return tuple((str(a), int(b)) for a, b in sorted(out, key=lambda v: -int(v[1])))

    # -- new objects -------------------------------------------------------------------------

    def _initialise(self, new: _Pending) -> Placement | None:
        """A new object from ``new`` and the pending rays that agree with it, or a guess
        where ``new`` measured its distance; else ``new`` waits (None)."""
        group = [e for e in self.pending if _same_kind(e, new)
                 and e.ray.stamp != new.ray.stamp
                 and (new.colour is None or e.colour == new.colour)]
        support = (self._agreeing(new, group) or self._ranged(new, group)
                   or self._anchored(new, group))
        if support is None:
            self.pending = [*self.pending, new][-MAX_PENDING:]
            return None
        return self._made(new, support)

    def _made(self, new: _Pending, support: Sequence[_Pending]) -> Placement:
        """The object ``support`` (pending rays, ``new`` among them) places: a placed one
        again where they fall on it (moved or missed), else a new one."""
        used = {id(e) for e in support}
        self.pending = [e for e in self.pending if id(e) not in used]
        rays = [e.ray for e in support]
        votes = self._voted((), [e.label for e in support])
        visits = [(r.stamp, r.stamp) for r in rays]
        moved, same = self._relocated(new, rays), self._same_place(new, rays)
        old = moved or same
        if old is not None:  # a moved object's old rays go, the same object's stay
            return self._claim(self._placed(
                old, [*rays, *(old.rays if moved is None else ())], [*old.visits, *visits],
                old.sightings + len(rays),
                self._voted(votes_of(old), [e.label for e in support])))
        key = new.label if new.colour else (head_word(votes[0][0]) or votes[0][0])
        fresh = Placement(self._next, self.robot, key, votes[0][0], new.colour, 0.0, 0.0,
                          0.0, False, (), (new.ray.x, new.ray.y), (), 0, votes)
        self._next += 1
        return self._claim(self._placed(fresh, rays, visits, len(rays), votes))

    def _lone(self, now: float) -> Iterator[Placement]:
        """Guesses from pending rays with a measured distance :meth:`_left_alone` long enough."""
        for e in [e for e in self.pending if e.ray.distance_m and now - e.ray.stamp >= LONE_WAIT_S]:
            if e in self.pending and self._left_alone(e):  # not taken by an earlier guess
                self.placements[p.id] = (p := self._made(e, [e]))  # the value first
                yield p

    def _left_alone(self, e: _Pending) -> bool:
        """Left alone: no other pending ray through the place ``e`` measured, no placement in
        its gate (nor one of its label in its bearing's gate: a distance mismeasured)."""
        here, bare = e.ray.point(e.ray.distance_m or 0.0), replace(e.ray, distance_m=None)
        if any(o is not e and _same_kind(o, e) and through(here, o.ray) for o in self.pending):
            return False
        return not any(_same_kind(p, e) and self.score(
            p, e.label, bare if self.matcher.same(p.label, e.label) else e.ray) is not None
            for p in self.placements.values())

    def _claim(self, p: Placement) -> Placement:
        """``p`` with the pending rays it explains better than a new object would (rays of
        other labels that waited: a wrong name or one the matcher does not join) joined."""
        stamps = {r.stamp for r in p.rays}
        mine = []
        for e in self.pending:
            score = (self.score(p, e.label, e.ray)
                     if _same_kind(e, p) and e.ray.stamp not in stamps
                     else None)
            if score is not None and score > NEW_OBJECT_LOG:
                mine.append(e)
                stamps.add(e.ray.stamp)
        if not mine:
            return p
        used = {id(e) for e in mine}
        self.pending = [e for e in self.pending if id(e) not in used]
        return self._placed(p, [*p.rays, *(e.ray for e in mine)],
                            [*p.visits, *((e.ray.stamp, e.ray.stamp) for e in mine)],
                            p.sightings + len(mine), self._voted(p.votes, [e.label for e in mine]))

    def _agreeing(self, new: _Pending, group: Sequence[_Pending]) -> list[_Pending] | None:
        """The largest set of ``group``'s rays with ``new`` that place an object (module
        notes), None where none does."""
        best: list[_Pending] | None = None
        for other in group:
            if math.dist((other.ray.x, other.ray.y), (new.ray.x, new.ray.y)) < SAME_POSE_M:
                continue
            q = triangulate([new.ray, other.ray])
            if q is None:
                continue
            near = [e for e in (new, *group) if through(q, e.ray)]
            q = triangulate([e.ray for e in near])
            if q is None:
                continue
            near = [e for e in near if through(q, e.ray)]  # q is in front of each (triangulate)
            rays = [e.ray for e in near]
            named = sum(self.matcher.same(e.label, new.label) for e in near)
            q = triangulate(rays)
            if (len(near) >= MIN_RAYS and 2 * named > len(near) and positions(rays) >= 2
                    and crossing_deg([r.angle for r in rays]) >= MIN_CROSSING_DEG
                    and q is not None and crossing_uncertainty(q, rays) <= MAX_NEW_UNCERTAINTY_M
                    and (best is None or len(near) > len(best))):
                best = near
        return best

    def _ranged(self, new: _Pending, group: Sequence[_Pending]) -> list[_Pending] | None:
        """``new`` and the pending rays of its label (or of a near label, their rays
        coinciding) whose measured distances put the object where ``new``'s does (within
        :data:`SIGMAS` of the distance's error): at least :data:`MIN_GUESS_RAYS` of them
        place a guess; None where they do not."""
        if (d := new.ray.distance_m) is None:
            return None
        here, near = new.ray.point(d), [new]
        for e in group:
            there = e.ray.point(e.ray.distance_m or 0.0)
            if (e.ray.distance_m is not None and self.matcher.near(e.label, new.label)
                    and math.dist(there, here) <= SIGMAS * RANGE_SHARE * max(d, e.ray.distance_m)
                    and (self.matcher.same(e.label, new.label)
                         or coincide(new.ray, here, e.ray, there))):
                near.append(e)
        return near if len(near) >= MIN_GUESS_RAYS else None

    def _anchored(self, new: _Pending, group: Sequence[_Pending]) -> list[_Pending] | None:
        """A pending ray of ``new``'s label (or one sharing its colour) with a measured
        distance and the rays of those labels without one that pass through the place it
        measured (:func:`~embodied_r_ros.memory.rays.through`), ``new`` among them: at least
        :data:`MIN_GUESS_RAYS`, from at least two camera positions, place the object (where
        they cross, else a guess at the measured distance); None where none does. So an
        object seen from afar, its distance measured, and close up, its foot below the image."""
        same = [new, *(e for e in group if self.matcher.near(e.label, new.label, by_head=False))]
        for anchor in sorted((e for e in same if e.ray.distance_m is not None),
                             key=lambda e: -e.ray.stamp):
            here = anchor.ray.point(anchor.ray.distance_m or 0.0)
            near = [anchor, *(e for e in same
                              if e.ray.distance_m is None and through(here, e.ray))]
            if (any(e is new for e in near) and len(near) >= MIN_GUESS_RAYS
                    and positions([e.ray for e in near]) >= 2):
                return near
        return None

    def _relocated(self, new: _Pending, rays: Sequence[Ray]) -> Placement | None:
        """The placed object of ``new``'s label, not seen in this visit, that ``rays`` place
        within :data:`RELOCATE_M` of: the same object, its old rays off by drift."""
        q = triangulate(rays)
        if q is None:
            return None
        near = [p for p in self.placements.values()
                if _same_kind(p, new) and new.ray.stamp - p.last > VISIT_GAP_S
                and math.dist(p.position, q) < RELOCATE_M and self.matcher.same(p.label, new.label)]
        return min(near, key=lambda p: math.dist(p.position, q), default=None)

    def _same_place(self, new: _Pending, rays: Sequence[Ray]) -> Placement | None:
        """The placed object of ``new``'s label that ``rays`` cross within the uncertainty of
        (of both): rays of it that missed its gate, not another object."""
        q = triangulate(rays)
        if q is None:
            return None
        spread = crossing_uncertainty(q, rays)
        near = [p for p in self.placements.values()
                if _same_kind(p, new) and math.dist(p.position, q) < min(p.uncertainty_m, spread)
                and self.matcher.same(p.label, new.label)]
        return min(near, key=lambda p: math.dist(p.position, q), default=None)

    def _placed(self, p: Placement, rays: Sequence[Ray], visits: Iterable[tuple[float, float]],
                sightings: int, votes: tuple[tuple[str, int], ...]) -> Placement:
        """``p`` with ``rays`` (the newest :data:`MAX_RAYS` kept) and ``votes``, placed
        again: at the crossing of the newest rays that cross at one spot, else as a guess
        from measured distances, else where it stood."""
        kept = tuple(sorted(rays, key=lambda r: r.stamp)[-MAX_RAYS:])
        position, spread, crossed = p.position, p.uncertainty_m, p.triangulated
        for start in range(0, max(len(kept) - 1, 1), 2):
            q = triangulate(kept[start:])
            if q is not None:
                position, spread, crossed = q, crossing_uncertainty(q, kept[start:]), True
                break
        else:
            if any(r.distance_m is not None for r in kept) and not p.triangulated:
                (position, spread), crossed = guess(kept), False
        label = votes[0][0] if votes else p.label
        key = p.key if p.colour else (head_word(label) or label)
        return replace(p, key=key, label=label, x=position[0], y=position[1],
                       uncertainty_m=spread, triangulated=crossed, visits=_visits(visits),
                       seen_from=(kept[-1].x, kept[-1].y), rays=kept, sightings=sightings,
                       votes=votes)


def place_frames(frames: Iterable[tuple[FrameRecord, Pose | None]], robot: str = "robot",
                 matcher: LabelMatcher | None = None) -> list[Placement]:
    """The placements of ``frames`` (records with their camera poses) placed in stamp order
    by a fresh :class:`Placer`: a memory's places where no store keeps them."""
    placer = Placer(robot, matcher=matcher)
    for record, pose in sorted(frames, key=lambda f: f[0].stamp):
        placer.add_frame(record, pose)
    return sorted(placer.placements.values(), key=lambda p: p.id)
