"""The placements table as both stores keep it: one row per placed object, keyed by robot.

The two databases differ here only in their column types and placeholders, so the statements
that write and read placements live once; each store runs them in its own transactions. The
rays (the writer's, to go on placing) are a column of their own that a reader never selects: a
question reads hundreds of objects in milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from embodied_r_ros.memory.placements import Placement, Ray

#: a placement's columns in the order they are written and selected; a reader leaves the rays
COLUMNS = ("robot, id, key, label, colour, x, y, uncertainty_m, triangulated, first, last, "
           "seen_x, seen_y, sightings, visits, votes, rays")
READ_COLUMNS = COLUMNS.removesuffix(", rays")


def ddl(table: str, real: str, integer: str, boolean: str) -> tuple[str, ...]:
    """The statements that create ``table`` (and its index) where it is missing, in a
    database's names for a double, an integer and a boolean."""
    return (f"CREATE TABLE IF NOT EXISTS {table} (robot text NOT NULL, id {integer} NOT NULL, "
            f"key text NOT NULL, label text NOT NULL, colour text, x {real} NOT NULL, "
            f"y {real} NOT NULL, uncertainty_m {real} NOT NULL, triangulated {boolean} NOT NULL, "
            f"first {real} NOT NULL, last {real} NOT NULL, seen_x {real} NOT NULL, "
            f"seen_y {real} NOT NULL, sightings integer NOT NULL, visits text NOT NULL, "
            "votes text NOT NULL DEFAULT '[]', rays text NOT NULL, PRIMARY KEY (robot, id))",
            f"CREATE INDEX IF NOT EXISTS {table}_last ON {table} (robot, last)")


def add_votes(table: str) -> str:
    """The statement that gives a schema-3 ``table`` its votes (schema 4): a placement
    stored before has none, and is read as named by its label once per sighting."""
    return f"ALTER TABLE {table} ADD COLUMN votes text NOT NULL DEFAULT '[]'"


def values(p: Placement) -> tuple[Any, ...]:
    """``p`` as :data:`COLUMNS`."""
    return (p.robot, p.id, p.key, p.label, p.colour, p.x, p.y, p.uncertainty_m,
            p.triangulated, p.first, p.last, p.seen_from[0], p.seen_from[1], p.sightings,
            json.dumps([list(v) for v in p.visits]),
            json.dumps([list(v) for v in p.votes], separators=(",", ":")),
            json.dumps([r.to_list() for r in p.rays], separators=(",", ":")))


def from_columns(row: Sequence[Any]) -> Placement:
    """A placement selected as :data:`COLUMNS`, or without its rays as :data:`READ_COLUMNS`."""
    (robot, id_, key, label, colour, x, y, spread, crossed, _, _, seen_x, seen_y, sightings,
     visits, votes, *rays) = row
    return Placement(int(id_), robot, key, label, colour, float(x), float(y), float(spread),
                     bool(crossed), tuple((float(a), float(b)) for a, b in json.loads(visits)),
                     (float(seen_x), float(seen_y)),
                     tuple(Ray.from_list(r) for r in json.loads(rays[0])) if rays else (),
                     int(sightings), tuple((str(a), int(b)) for a, b in json.loads(votes)))


def placed_key(robot: str) -> str:
    """The meta key of the newest row id whose objects ``robot``'s placements hold."""
    return f"placed_through:{robot}"


class PlacementTable:
    """The statements on one store's placements ``table`` and ``meta`` table, with its
    placeholder ``mark`` (``?`` or ``%s``); each method takes a cursor in the caller's
    transaction."""

    def __init__(self, table: str, meta: str, mark: str) -> None:
        self.table, self.meta, self.mark = table, meta, mark

    def save(self, cur: Any, robot: str, placements: Sequence[Placement],
             gone: Sequence[int], through_id: int) -> None:
        m, names = self.mark, COLUMNS.split(", ")
        if gone:
            cur.executemany(f"DELETE FROM {self.table} WHERE robot={m} AND id={m}",
                            [(robot, int(i)) for i in gone])
        mine = [values(p) for p in placements if p.robot == robot]
        if mine:
            update = ", ".join(f"{c}=excluded.{c}" for c in names[2:])
            cur.executemany(f"INSERT INTO {self.table} ({COLUMNS}) VALUES "
                            f"({', '.join([m] * len(names))}) ON CONFLICT (robot, id) DO "
                            f"UPDATE SET {update}", mine)
        cur.execute(f"INSERT INTO {self.meta} VALUES ({m}, {m}) ON CONFLICT (key) DO UPDATE "
                    "SET value=excluded.value", (placed_key(robot), str(int(through_id))))

    def read(self, cur: Any, robots: Sequence[str] | None, rays: bool) -> list[Placement]:
        columns = COLUMNS if rays else READ_COLUMNS
        where = "" if robots is None else (
            f" WHERE robot IN ({', '.join([self.mark] * len(robots))})" if robots
            else " WHERE false")
        cur.execute(f"SELECT {columns} FROM {self.table}{where} ORDER BY robot, id",
                    tuple(robots or ()))
        return [from_columns(r) for r in cur.fetchall()]

    def placed_through(self, cur: Any, robot: str) -> int:
        cur.execute(f"SELECT value FROM {self.meta} WHERE key={self.mark}", (placed_key(robot),))
        got = cur.fetchone()
        return int(got[0]) if got else 0

    def forget(self, cur: Any, frames: str, robot: str, before: float) -> None:
        """After ``robot``'s rows before ``before`` were deleted from ``frames``: drop its
        placements last seen before then, and its placed row id where no row is left (a
        store's ids may start again)."""
        m = self.mark
        cur.execute(f"DELETE FROM {self.table} WHERE robot={m} AND last<{m}", (robot, before))
        cur.execute(f"DELETE FROM {self.meta} WHERE key={m} AND NOT EXISTS (SELECT 1 FROM "
                    f"{frames} WHERE robot={m})", (placed_key(robot), robot))

    def prune(self, cur: Any, frames: str, robot: str | None = None) -> None:
        """Drop the placements (``robot``'s, else every robot's) last seen before their
        robot's oldest row in ``frames``."""
        m = self.mark
        mine = "" if robot is None else f"robot={m} AND "
        cur.execute(f"DELETE FROM {self.table} WHERE {mine}last < coalesce((SELECT "
                    f"min(stamp) FROM {frames} f WHERE f.robot = {self.table}.robot), {m})",
                    (*(() if robot is None else (robot,)), 1e308))
