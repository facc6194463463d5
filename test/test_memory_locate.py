"""Where the memory placed the objects some words name (``memory/locate.py``), without ROS: the
lookup on typed placements (names, times, approach poses, votes), the checked request, and
``embodied-r memory locate`` on a SQLite memory."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from placed_memory import FLEET_CHAIR, MINE, NEW_CHAIR, NOW, OLD_CHAIR, SOFA, T0, write_memory

from embodied_r_ros.cli import main
from embodied_r_ros.memory.errors import BAD_REQUEST, BAD_TIME_PHRASE, SpatialMemoryError
from embodied_r_ros.memory.locate import MAX_RESULTS, LocateRequest, find

TIMELINE = (T0, NOW)


def ids(found: list) -> list[tuple[str, int]]:
    return [(f.placement.robot, f.placement.id) for f in found]


def test_every_object_the_words_name_newest_first_with_its_votes_and_approach() -> None:
    found = find(MINE, LocateRequest.checked("chairs"), TIMELINE)
    assert ids(found) == [("robot", NEW_CHAIR.id), ("robot", OLD_CHAIR.id)]  # two chairs
    old = found[1]
    assert old.placement.votes == (("office chair", 5), ("sofa", 1))
    assert (old.placement.x, old.placement.y) == (6.0, -2.0)
    # the approach is where the camera saw it from, facing it; never the centre
    assert (old.approach.x, old.approach.y) == OLD_CHAIR.seen_from
    assert old.approach.yaw_deg == pytest.approx(-45.0)
    assert found[0].approach.yaw_deg == pytest.approx(90.0)
    # a colour the label does not contradict still names it; a word names only its own kind
    assert ids(find(MINE, LocateRequest.checked("the red chair"), TIMELINE)) == ids(found)
    assert ids(find(MINE, LocateRequest.checked("sofa"), TIMELINE)) == [("robot", SOFA.id)]


def test_nothing_placed_by_that_name_is_an_empty_answer() -> None:
    assert find(MINE, LocateRequest.checked("bicycle"), TIMELINE) == []
    assert find([], LocateRequest.checked("chair"), None) == []


@pytest.mark.parametrize(("words", "phrase", "start", "end", "expected"), [
    ("chair", "at the start", None, None, [OLD_CHAIR.id]),
    ("chair", "10 minutes ago", None, None, [OLD_CHAIR.id]),
    ("chair you saw 10 minutes ago", "", None, None, [OLD_CHAIR.id]),
    ("chair", "in the last 2 minutes", None, None, [NEW_CHAIR.id]),
    ("chair", "", T0 + 400.0, None, [NEW_CHAIR.id]),
    ("chair", "", None, T0 + 10.0, [OLD_CHAIR.id]),
    ("chair", "", T0 + 100.0, T0 + 200.0, []),
])
def test_a_time_keeps_the_objects_seen_then(words: str, phrase: str, start: float | None,
                                             end: float | None, expected: list[int]) -> None:
    request = LocateRequest.checked(words, phrase, start, end)
    assert [f.placement.id for f in find(MINE, request, TIMELINE)] == expected


def test_the_most_results_keeps_the_newest() -> None:
    found = find([*MINE, FLEET_CHAIR], LocateRequest.checked("chair", max_results=2), TIMELINE)
    assert ids(found) == [("robot-b", 1), ("robot", NEW_CHAIR.id)]


@pytest.mark.parametrize(("kwargs", "code", "says"), [
    ({"words": "chair", "time_phrase": "5 blorps ago"}, BAD_TIME_PHRASE, "5 blorps ago"),
    ({"words": "chair", "time_phrase": "yesterday"}, BAD_TIME_PHRASE, "yesterday"),
    ({"words": "chair seen 20 seconds before I turned"}, BAD_TIME_PHRASE, "before"),
    ({"words": "the one over there"}, BAD_REQUEST, "name no object"),
    ({"words": "chair", "start": 5.0, "end": 1.0}, BAD_REQUEST, "after the end"),
    ({"words": "chair", "start": math.nan}, BAD_REQUEST, "finite"),
    ({"words": "chair", "time_phrase": "at the start", "start": 1.0}, BAD_REQUEST, "not both"),
    ({"words": "chair", "max_results": 0}, BAD_REQUEST, "1 to"),
    ({"words": "chair", "max_results": MAX_RESULTS + 1}, BAD_REQUEST, "1 to"),
    ({"words": "chair " * 60}, BAD_REQUEST, "at most"),
])
def test_a_bad_request_is_refused_with_its_code(kwargs: dict, code: str, says: str) -> None:
    with pytest.raises(SpatialMemoryError) as err:
        LocateRequest.checked(**kwargs)
    assert err.value.code == code and says in str(err.value) and "\n" not in str(err.value)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_memory(tmp_path_factory.mktemp("locate") / "memory.sqlite3")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["memory", "locate", *argv, "--embedder", "off"])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_prints_what_the_lookup_finds(db: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(db), "red chair", "--robot", "robot", "--json")
    assert code == 0
    found = json.loads(out)
    assert found["robot"] == "robot" and found["terms"] == ["red", "chair"]
    assert [(o["id"], o["label"]) for o in found["objects"]] == [(2, "chair"),
                                                                 (1, "office chair")]
    old = found["objects"][1]
    assert (old["x"], old["y"], old["first"], old["last"]) == (6.0, -2.0, T0, T0 + 20.0)
    assert old["approach"] == {"x": 4.0, "y": 0.0, "yaw_deg": -45.0}
    code, out, _ = run(capsys, str(db), "chair", "--robot", "robot", "--fleet", "--json",
                       "--time", "in the last minute")
    assert code == 0
    assert [(o["robot"], o["id"]) for o in json.loads(out)["objects"]] == [("robot-b", 1),
                                                                         ("robot", 2)]
    code, out, _ = run(capsys, str(db), "office chair", "--robot", "robot", "--end", "1100")
    assert code == 0
    assert out.startswith('1 placed object(s) named "office chair"')
    assert "office chair [robot #1] at (6.00, -2.00)" in out
    assert "approach from (4.00, 0.00) facing -45 deg" in out
    code, out, _ = run(capsys, str(db), "bicycle", "--robot", "robot", "--json")
    assert code == 0 and json.loads(out)["objects"] == []


@pytest.mark.parametrize(("args", "code_name"), [
    (["chair", "--robot", "robot", "--time", "5 blorps ago"], "BAD_TIME_PHRASE"),
    (["chair", "--robot", "robot", "--max", "0"], "BAD_REQUEST"),
    (["the", "--robot", "robot"], "BAD_REQUEST"),
    (["chair"], "DB_MISSING"),  # two robots: which one?
])
def test_bad_input_is_one_line_and_exit_code_2(db: Path, capsys: pytest.CaptureFixture[str],
                                               args: list[str], code_name: str) -> None:
    code, out, err = run(capsys, str(db), *args)
    assert code == 2 and not out
    assert err.count("\n") == 1 and f"error: {code_name}: " in err
