"""``embodied-r memory stats | search | locate | plot | export DB``: look into a memory from a
shell.

``DB`` is a SQLite memory file, or a PostgreSQL connection string (``postgresql://...`` or
``host=... dbname=...``, with ``--robot``). Every command opens it for reading, so it runs beside
the robot that writes it. A missing or damaged database, or a time phrase that cannot be read,
is one line on stderr and exit code 2 (the ``SpatialMemoryError`` code first). ``search`` also
lists the placed objects its question names and the places lines the reasoner would read;
``locate`` lists where the objects some words name were placed and where to approach them from
(what the ``memory/locate`` service answers);
``plot`` draws the placed objects on the path; ``export`` writes them as scene entities.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.core.config import KEY_FRAME_BUDGET, LATEST_FRAMES, MemoryConfig
from embodied_r_ros.core.perception_text import place_line
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.memory.embedder import load_embedder
from embodied_r_ros.memory.errors import DB_MISSING, SpatialMemoryError
from embodied_r_ros.memory.labels import LabelMatcher
from embodied_r_ros.memory.locate import Located, LocateRequest, locate
from embodied_r_ros.memory.placements import Placement
from embodied_r_ros.memory.places import named_things
from embodied_r_ros.memory.retrieval import Retriever, Selection
from embodied_r_ros.memory.service import frames_used
from embodied_r_ros.memory.sqlite_store import SqliteMemoryStore
from embodied_r_ros.memory.store import MemoryStore


def open_reader(db: str, robot: str | None) -> MemoryStore:
    """``db`` opened for reading: a PostgreSQL DSN or a SQLite file."""
    if db.startswith(("postgres://", "postgresql://")) or "dbname=" in db:
        from embodied_r_ros.memory.postgres_store import PostgresMemoryStore

        if not robot:
            raise SpatialMemoryError(DB_MISSING, "a PostgreSQL memory needs --robot")
        return PostgresMemoryStore(db, robot=robot)
    return SqliteMemoryStore(db)


def pick_robot(store: MemoryStore, robot: str | None) -> str:
    """``robot``, or the store's only robot."""
    robots = store.robots()
    if robot:
        if robot not in robots:
            raise SpatialMemoryError(DB_MISSING, f"no rows of robot {robot!r}; the memory has "
                                     f"{', '.join(robots) or 'none'}")
        return robot
    if len(robots) != 1:
        raise SpatialMemoryError(DB_MISSING, "the memory is empty" if not robots else
                                 f"the memory has several robots ({', '.join(robots)}): "
                                 "choose one with --robot")
    return robots[0]


def _select(store: MemoryStore, robot: str, args: argparse.Namespace) -> Selection:
    retriever = Retriever(store, budget=args.budget, latest=min(args.latest, args.budget - 1),
                          share_placements=args.fleet)
    return retriever.select(robot, args.question, args.option or ())


def named_placements(selection: Selection, question: str, options: Sequence[str]
                     ) -> list[Placement]:
    """The placed objects ``question`` names (those its places block is written from)."""
    now = max((r.stamp for r in selection.rows), default=math.inf)
    return [p for n in named_things(selection.placements or [], question, options, now,
                                    selection.matcher) for p in n.objects]


def placement_json(p: Placement, now: float | None) -> dict[str, Any]:
    return {"robot": p.robot, "id": p.id, "label": p.label, "colour": p.colour,
            "x": round(p.x, 3), "y": round(p.y, 3), "uncertainty_m": round(p.uncertainty_m, 3),
            "triangulated": p.triangulated, "sightings": p.sightings, "first": p.first,
            "last": p.last, "last_age_sec": None if now is None else now - p.last}


def _clock(stamp: float | None) -> str:
    return "-" if stamp is None else f"{stamp:.3f}"


def cmd_stats(args: argparse.Namespace) -> int:
    with open_reader(args.db, args.robot) as store:
        robots = [args.robot] if args.robot else store.robots()
        spans = {r: store.span(r) for r in robots}
        size = store.size_bytes()
    if args.json:
        print(json.dumps({"db": args.db, "size_bytes": size, "robots": {
            r: {"rows": s.count, "first": s.first, "last": s.last,
                "span_sec": (s.last - s.first) if s.count else 0.0}
            for r, s in spans.items()}}))
        return 0
    print(f"{args.db}: {size / 2**20:.2f} MiB, {len(robots)} robot(s)")
    for r, s in spans.items():
        span = (s.last - s.first) if s.first is not None and s.last is not None else 0.0
        print(f"  {r}: {s.count} rows, {_clock(s.first)} .. {_clock(s.last)} s "
              f"({span / 60:.1f} min)")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    with open_reader(args.db, args.robot) as store:
        robot = pick_robot(store, args.robot)
        selection = _select(store, robot, args)
    used = frames_used(selection)
    options = args.option or []
    placed = named_placements(selection, args.question, options)
    now = max((r.stamp for r in selection.rows), default=None)
    record = selection.record(args.question, options, format_question(args.question, options))
    places = [place_line(n) for n in record.places or ()]
    if args.json:
        print(json.dumps({"robot": robot, "terms": selection.terms, "notes": selection.notes,
                          "ranges": [[r.phrase, r.start, r.end] for r in selection.ranges],
                          "frames": [{"stamp": u.stamp, "age_sec": u.age_sec,
                                      "camera": u.camera, "reasons": list(u.reasons),
                                      "description": u.description} for u in used],
                          "placed": [placement_json(p, now) for p in placed],
                          "places": places}))
        return 0
    print(f"{len(used)} frames of {robot} for: {args.question}")
    if selection.terms:
        print(f"terms: {', '.join(selection.terms)}")
    for r in selection.ranges:
        print(f'time "{r.phrase}": {r.start:.1f} .. {r.end:.1f} s')
    for note in selection.notes:
        print(f"note: {note}")
    for u in used:
        text = " ".join(u.description.split())
        print(f"{u.stamp:.3f} s ({u.age_sec:.0f} s ago) [{', '.join(u.reasons)}] "
              f"{text[:100]}")
    if placed:
        print(f"placed ({len(placed)} named):")
        for p in placed:
            how = f"crossed from {p.sightings} views" if p.triangulated else "one view"
            age = f", last seen {now - p.last:.0f} s ago" if now is not None else ""
            print(f"  {p.label} [{p.robot}] at ({p.x:.2f}, {p.y:.2f}) m, within "
                  f"{p.uncertainty_m:.2f} m, {how}{age}")
    for line in places:
        print(f"places: {line}")
    return 0


def located_json(found: Located) -> dict[str, Any]:
    """One located object as ``locate --json`` prints it."""
    p, a = found.placement, found.approach
    return {**placement_json(p, None), "votes": [[label, n] for label, n in p.votes],
            "approach": {"x": round(a.x, 3), "y": round(a.y, 3),
                         "yaw_deg": round(a.yaw_deg, 2)}}


def cmd_locate(args: argparse.Namespace) -> int:
    request = LocateRequest.checked(args.words, args.time or "", args.start, args.end,
                                    args.fleet, args.max)
    with open_reader(args.db, args.robot) as store:
        robot = pick_robot(store, args.robot)
        found = locate(store, robot, request, LabelMatcher(load_embedder(args.embedder)))
    if args.json:
        print(json.dumps({"robot": robot, "terms": list(request.terms),
                          "objects": [located_json(f) for f in found]}))
        return 0
    whose = "the fleet's" if request.fleet else f"{robot}'s"
    print(f'{len(found)} placed object(s) named "{args.words}" in {whose} placements '
          "(odometry frame, m):")
    for f in found:
        p, a = f.placement, f.approach
        how = f"crossed from {p.sightings} sightings" if p.triangulated else \
            f"a guess from {p.sightings} sighting(s)"
        votes = ", ".join(f"{label} {n}" for label, n in p.votes) or "-"
        print(f"  {p.label} [{p.robot} #{p.id}] at ({p.x:.2f}, {p.y:.2f}) within "
              f"{p.uncertainty_m:.2f}, {how}, seen {p.first:.1f} .. {p.last:.1f} s; approach "
              f"from ({a.x:.2f}, {a.y:.2f}) facing {a.yaw_deg:.0f} deg; votes: {votes}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embodied_r_ros.memory.export import rows_of

    with open_reader(args.db, args.robot) as store:
        robot = pick_robot(store, args.robot)
        rows = [r for r in rows_of(store, robot, thumbnails=False) if r.pose is not None]
        selection = _select(store, robot, args) if args.question else None
        placed = store.placements(None if args.fleet else [robot])
    named = ({(p.robot, p.id) for p in named_placements(selection, args.question,
                                                         args.option or [])}
             if selection is not None else set())
    if not rows:
        raise SpatialMemoryError(DB_MISSING, f"no row of {robot} has a pose to plot")
    fig, ax = plt.subplots(figsize=(8, 8))
    xs, ys = [r.pose.x for r in rows if r.pose], [r.pose.y for r in rows if r.pose]
    ax.plot(xs, ys, "-", color="0.6", lw=1, label="path")
    ax.scatter(xs, ys, c=[r.stamp for r in rows], cmap="viridis", s=12, zorder=2,
               label=f"key frames ({len(rows)})")
    ax.plot(xs[0], ys[0], "go", ms=9, label="first")
    ax.plot(xs[-1], ys[-1], "rs", ms=9, label="last")
    if selection is not None:
        picked = [r for r in selection.rows if r.pose is not None]
        ax.scatter([r.pose.x for r in picked if r.pose], [r.pose.y for r in picked if r.pose],
                   s=90, facecolors="none", edgecolors="red", lw=1.5, zorder=3,
                   label=f"retrieved ({len(picked)})")
        ax.set_title(f"{robot}: {args.question}", fontsize=9)
    else:
        ax.set_title(f"{robot}: {len(rows)} key frames", fontsize=9)
    _draw_placements(ax, placed, named)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.legend(loc="best", fontsize=8)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")
    return 0


def _draw_placements(ax: Any, placed: Sequence[Placement], named: set[tuple[str, int]]
                     ) -> None:
    """The placed objects on the path: a dot in the object's colour (black for a labelled
    one) inside a circle as wide as its uncertainty, crosses for guesses from one view; the
    labels of those crossed from several views, and of those the question names."""
    from matplotlib.patches import Circle

    for crossed in (True, False):
        mine = [p for p in placed if p.triangulated == crossed]
        if not mine:
            continue
        colours = [p.colour or "black" for p in mine]
        ax.scatter([p.x for p in mine], [p.y for p in mine], c=colours, s=40 if crossed else 25,
                   marker="o" if crossed else "x", zorder=4, edgecolors="black" if crossed
                   else None, linewidths=0.5,
                   label=f"placed objects ({len(mine)})" if crossed else
                   f"guessed from one view ({len(mine)})")
        for p, colour in zip(mine, colours, strict=True):
            if crossed:
                ax.add_patch(Circle((p.x, p.y), p.uncertainty_m, color=colour, alpha=0.12,
                                    zorder=1))
            if crossed or (p.robot, p.id) in named:
                ax.annotate(p.label, (p.x, p.y), fontsize=7, xytext=(4, 4),
                            textcoords="offset points",
                            fontweight="bold" if (p.robot, p.id) in named else "normal")


def cmd_export(args: argparse.Namespace) -> int:
    from embodied_r_ros.memory.export import export_mcap, foxglove_layout

    out = Path(args.out)
    with open_reader(args.db, args.robot) as store:
        robot = pick_robot(store, args.robot)
        counts = export_mcap(store, robot, out)
    layout = Path(args.layout) if args.layout else out.with_suffix(".layout.json")
    layout.write_text(json.dumps(foxglove_layout(), indent=2))
    print(f"wrote {out} ({counts.rows} key frames, {counts.poses} poses, {counts.thumbnails} "
          f"thumbnails, {counts.objects} placed objects) and the Foxglove layout {layout}")
    return 0


def _budget(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 2 <= value <= 1024:
        raise argparse.ArgumentTypeError(f"{value} is not in 2..1024")
    return value


def add_memory_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``memory`` and its commands on the main CLI."""
    p = subparsers.add_parser("memory", help="look into a spatial memory (stats, search, "
                              "locate, plot, export)", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="memory_command", required=True, parser_class=type(p))

    def command(name: str, help_: str, func: Any, question: bool = False
                ) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help_)
        c.add_argument("db", help="the SQLite memory file, or a PostgreSQL connection string")
        c.add_argument("--robot", help="whose rows (default: the memory's only robot)")
        if question:
            c.add_argument("--option", "-o", action="append", help='an option such as "A. left"')
            c.add_argument("--fleet", action="store_true", help="every robot's placed objects "
                           "of the store, not only this robot's (memory.share_placements)")
            c.add_argument("--budget", type=_budget, default=KEY_FRAME_BUDGET,
                           help="key frames a question selects (memory.budget)")
            c.add_argument("--latest", type=_budget, default=LATEST_FRAMES,
                           help="newest key frames every selection includes (memory.latest)")
        c.set_defaults(func=func)
        return c

    stats = command("stats", "rows, time span, size and robots", cmd_stats)
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    search = command("search", "the frames retrieval selects for a question, with reasons, "
                     "and the placed objects it names", cmd_search, question=True)
    search.add_argument("question", help='a question or terms: "where was the red chair 10 '
                        'minutes ago?"')
    search.add_argument("--json", action="store_true", help="print one JSON object")
    find = command("locate", "where the objects some words name were placed, and the pose "
                   "to approach each from (as the memory/locate service answers)", cmd_locate)
    find.add_argument("words", help='the object words: "red chair"')
    find.add_argument("--time", help='only objects seen then: "10 minutes ago", "in the last '
                      '5 minutes" (not with --start/--end)')
    find.add_argument("--start", type=float, help="only objects seen at or after this stamp (s)")
    find.add_argument("--end", type=float, help="only objects seen at or before this stamp (s)")
    find.add_argument("--fleet", action="store_true", help="every robot's placed objects of "
                      "the store, not only this robot's (memory.share_placements)")
    find.add_argument("--max", type=int, help="the most objects to list (default 10)")
    find.add_argument("--embedder", choices=("auto", "off", "required"),
                      default=MemoryConfig().embedder, help="match labels in other words with "
                      "the embedder too (memory.embedder)")
    find.add_argument("--json", action="store_true", help="print one JSON object")
    plot = command("plot", "a PNG of the path, its key frames, the placed objects and the "
                   "frames retrieved for --question", cmd_plot, question=True)
    plot.add_argument("--question", "-q", help="circle the frames selected for it")
    plot.add_argument("--out", required=True, help="the PNG to write")
    export = command("export", "an MCAP file of the path, thumbnails and descriptions for "
                     "Foxglove", cmd_export)
    export.add_argument("--out", required=True, help="the .mcap file to write")
    export.add_argument("--layout", help="the Foxglove layout to write (default: beside --out, "
                        ".layout.json)")
    return p
