"""A small memory of placed objects for the locate tests: two chairs seen ten minutes apart, a
sofa, a table and another robot's chair, as typed placements (with label votes) and as a
SQLite memory that holds them beside its key frames."""

from __future__ import annotations

from pathlib import Path

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.memory import MemoryRow, SqliteMemoryStore
from embodied_r_ros.memory.placements import Placement

T0 = 1000.0
#: the robot's key frames: one every 20 s for ten minutes and a half, from T0
ROW_STAMPS = [T0 + 20.0 * i for i in range(31)]
NOW = ROW_STAMPS[-1]


def placement(id_: int, label: str, at: tuple[float, float], seen_from: tuple[float, float],
              seen: tuple[float, float], robot: str = "robot",
              votes: tuple[tuple[str, int], ...] = ()) -> Placement:
    """A triangulated placement of ``label`` seen from ``seen_from`` during ``seen``."""
    return Placement(id=id_, robot=robot, key=label.split()[-1], label=label, colour=None,
                     x=at[0], y=at[1], uncertainty_m=0.3, triangulated=True, visits=(seen,),
                     seen_from=seen_from, sightings=sum(n for _, n in votes) or 4, votes=votes)


#: the old chair, seen at the start from (4, 0) (facing it: -45 degrees)
OLD_CHAIR = placement(1, "office chair", (6.0, -2.0), (4.0, 0.0), (T0, T0 + 20.0),
                      votes=(("office chair", 5), ("sofa", 1)))
#: the chair seen at the end from (1, 2) (facing it: +90 degrees)
NEW_CHAIR = placement(2, "chair", (1.0, 5.0), (1.0, 2.0), (NOW - 40.0, NOW - 20.0),
                      votes=(("chair", 3),))
SOFA = placement(3, "sofa", (-3.0, 1.0), (0.0, 1.0), (T0 + 300.0, T0 + 320.0))
TABLE = placement(4, "table", (2.0, -4.0), (2.0, 0.0), (T0 + 100.0, T0 + 140.0))
#: another robot's chair, seen last of all
FLEET_CHAIR = placement(1, "chair", (9.0, 9.0), (7.0, 9.0), (NOW - 10.0, NOW), robot="robot-b")
MINE = [OLD_CHAIR, NEW_CHAIR, SOFA, TABLE]


def write_memory(path: Path) -> Path:
    """A SQLite memory at ``path`` holding the robot's key frames and its placements, and one
    key frame and the chair of ``robot-b``; written through the store's own API."""
    with SqliteMemoryStore(path, writable=True) as store:
        last = 0
        for stamp in ROW_STAMPS:
            last = store.add(MemoryRow(stamp=stamp, description="I see a room.",
                                       pose=Pose(0.0, 0.0, 0.0, 0.0), pose_source="odometry"))
        store.save_placements("robot", MINE, [], last)
        other = store.add(MemoryRow(stamp=NOW, description="I see a chair.", robot="robot-b"))
        store.save_placements("robot-b", [FLEET_CHAIR], [], other)
    return path
