"""The long-world oracle reads a memory's perception record: objects the memory placed from its
stored poses and bearings, told apart by when they were seen, and what the notes cannot say."""

from __future__ import annotations

import pytest
from memory_rows import TWO_VISITS, memory_rec

from embodied_r_ros.core.perception_text import render
from embodied_r_ros.core.records import FrameRecord, ObjectPlace, PerceptionRecord
from embodied_r_ros.memory.placements import place_frames
from lab.long_world.oracle import (
    references,
    solve_record,
    window_s,
)


def _record(question: str, options: list[str]) -> PerceptionRecord:
    return memory_rec(TWO_VISITS, question, options)


def _answer(category: str, question: str, options: list[str]) -> str | None:
    return solve_record(category, _record(question, options)).letter


QUADRANTS = ["A. front-left", "B. front-right", "C. back-left", "D. back-right"]


def test_objects_of_one_colour_are_told_apart_by_when_they_were_seen() -> None:
    placed = place_frames((r.frame_record(), r.pose) for r in TWO_VISITS)
    reds = [p for p in placed if p.colour == "red"]
    assert len(reds) == 2
    old = next(o for o in reds if o.last < 100)
    assert old.triangulated and old.position == pytest.approx((4.0, 2.0), abs=0.15)  # 2 views
    assert _answer("object_direction", "Where is the red box relative to you now?",
                   QUADRANTS) == "A"  # the one seen last: 30 degrees left
    assert _answer("object_direction", "Where is the red box you saw about 17 minutes ago "
                   "relative to you now?", QUADRANTS) == "B"  # (4, 2) from (8, 0) facing back


def test_distance_last_seen_and_seen_read_the_text() -> None:
    bands = ["A. less than 2 m", "B. between 2 and 5 m", "C. between 5 and 10 m",
             "D. more than 10 m"]
    assert _answer("object_distance", "How far is the red box you saw about 17 minutes ago "
                   "from you now?", bands) == "B"  # 4.5 m
    ages = ["A. less than 1 minute ago", "B. between 1 and 5 minutes ago",
            "C. between 5 and 15 minutes ago", "D. more than 15 minutes ago"]
    assert _answer("last_seen", "How long ago did you last see the blue box?", ages) == "D"
    yes_no = ["A. yes", "B. no"]
    assert _answer("seen", "Did you see a blue box in the last 5 minutes?", yes_no) == "B"
    assert _answer("seen", "Did you see a blue box at all so far?", yes_no) == "A"
    assert _answer("seen", "Which of these objects did you see in the last minute?",
                   ["A. blue box", "B. green cone", "C. red cone"]) == "C"


def test_next_to_and_closer_use_the_located_objects() -> None:
    assert _answer("next_to", "Which object stood next to the blue box (the nearest to it)?",
                   ["A. green cone", "B. red sphere"]) == "B"
    assert _answer("closer", "Which is closer to you now, in a straight line: the blue box or "
                   "the red box you saw about 17 minutes ago?",
                   ["A. the blue box", "B. the red box you saw about 17 minutes ago"]) == "B"


def test_the_route_back_turns_towards_where_the_object_was_seen() -> None:
    turns = ["A. Go straight ahead.", "B. Turn left.", "C. Turn right.", "D. Turn around."]
    # the blue object was last seen from (0, -2); from (8, 0) facing back it is ahead, a
    # little to the left (14 degrees)
    assert _answer("route_back", "You want to go back to where you were when you last saw "
                   "the blue box. Which way do you turn first to face that spot?", turns) == "A"
    # the red seen last was seen from here: no turn; the one of 17 minutes ago from (0, -2)
    assert _answer("route_back", "You want to go back to where you were when you last saw "
                   "the red box you saw about 17 minutes ago. Which way do you turn first to "
                   "face that spot?", turns) == "A"


def test_what_the_text_cannot_carry_is_left_undecided() -> None:
    unseen = solve_record("object_direction",
                          _record("Where is the green cone relative to you now?", QUADRANTS))
    assert unseen.letter is None and "no green" in unseen.evidence


def test_references_and_windows_are_read_from_the_words() -> None:
    refs = references("the cyan cone in room 3 or the red box you saw about 1 minute ago")
    assert [(r.colour, r.shape, r.area, r.minutes_ago) for r in refs] == [
        ("cyan", "cone", "room 3", None), ("red", "box", None, 1.0)]
    assert window_s("Did you see a red box in the last 10 minutes?") == 600.0
    assert window_s("Did you see a red box in the last minute?") == 60.0
    assert window_s("Did you see a red box at all so far?") == float("inf")
    assert window_s("Where is the red box?") is None


def test_the_evidence_restates_the_places_line_and_compares_at_the_band_edges() -> None:
    """What a think text concludes from: the quadrant in the line's own words, and a number
    against the edges of its band, for a reasoner to copy rather than recompute."""
    where = "Where is the red box you saw about 17 minutes ago relative to you now?"
    record = _record(where, QUADRANTS)
    text = render(record)
    found = solve_record("object_direction", record)
    assert found.evidence.startswith("the red object is now front-right (")
    stated = found.evidence.removeprefix("the red object is now ")
    assert f" m away, {stated}, within about" in text  # as the places line puts it
    bands = ["A. less than 2 m", "B. between 2 and 5 m", "C. between 5 and 10 m",
             "D. more than 10 m"]
    far = solve_record("object_distance", _record("How far is the red box you saw about 17 minutes "
                                              "ago from you now?", bands))
    assert far.evidence.endswith("is over 2 and under 5, so between 2 and 5 m")
    ages = ["A. less than 1 minute ago", "B. between 1 and 5 minutes ago",
            "C. between 5 and 15 minutes ago", "D. more than 15 minutes ago"]
    old = solve_record("last_seen", _record("How long ago did you last see the blue box?", ages))
    assert old.evidence.endswith("s is over 900, so more than 15 minutes ago")
    closer = solve_record("closer", _record(
        "Which is closer to you now, in a straight line: the blue box or the red box you saw "
        "about 17 minutes ago?", ["A. the blue box", "B. the red box you saw about 17 minutes "
                                  "ago"]))
    assert closer.evidence.endswith("away: B is closer")
    seen = solve_record("seen", _record("Did you see a blue box in the last 5 minutes?",
                                    ["A. yes", "B. no"]))
    assert seen.evidence.endswith("is over 300): no")


def test_labelled_objects_are_found_by_label_not_by_colour_alone() -> None:
    """A grounding VLM's places name labels: "the red box" is the red box, not the red
    sphere seen since (colour records could not tell them apart), nor a blue box."""
    notes = (ObjectPlace("red sphere", (30.0,), 30.0, now=(3.0, 40.0)),
             ObjectPlace("red box", (600.0,), 600.0, now=(4.0, -120.0)),
             ObjectPlace("blue box", (5.0,), 5.0, now=(8.0, 100.0)))

    def solve(category: str, question: str, options: list[str]) -> tuple[str | None, str]:
        record = PerceptionRecord((FrameRecord(1000.0),), question, tuple(options), "",
                                  places=notes)
        found = solve_record(category, record)
        return found.letter, found.evidence

    letter, evidence = solve("object_direction", "Where is the red box relative to you "
                             "now?", QUADRANTS)
    assert letter == "D" and evidence.startswith("the red box is now")  # behind, right
    bands = ["A. less than 2 m", "B. between 2 and 5 m", "C. between 5 and 10 m",
             "D. more than 10 m"]
    assert solve("object_distance", "How far is the red box from you now?", bands)[0] == "B"
    assert solve("object_distance", "How far is the blue box from you now?", bands)[0] == "C"
    letter, evidence = solve("object_direction", "Where is the green box relative to you "
                             "now?", QUADRANTS)
    assert letter is None and "no green" in evidence
