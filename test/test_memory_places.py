"""A memory text states where the objects a question names are now: the dead reckoning and
triangulation over frames minutes apart done once, by the memory, from the text's own frames."""

from __future__ import annotations

import math
import re

import pytest
from memory_rows import TWO_VISITS, memory_text, odometry_row

from embodied_r_ros.core.perception_text import PLACES_HEADING
from embodied_r_ros.memory import MemoryRow
from embodied_r_ros.memory.places import OBJECTS_PER_COLOUR, colour_times


def _places(text: str) -> list[str]:
    """The places block's lines, between the frames and the question."""
    _, _, after = text.partition("\n>\n")
    block, _, _ = after.partition("Question:")
    lines = block.strip().splitlines()
    assert lines and lines[0] == PLACES_HEADING
    return lines[1:]


def test_an_object_seen_long_ago_is_placed_relative_to_the_robot_now() -> None:
    text = memory_text(
        TWO_VISITS, "Which object stood next to the red box you saw about 17 minutes ago?",
        ["A. blue cone", "B. yellow sphere"])
    lines = _places(text)
    old = next(line for line in lines if "red object seen 16 min ago" in line)  # 990 s
    # (4, 2) from (8, 0) facing -x: 4.5 m away, 27 degrees to the right
    m = re.search(r"now (\d+\.\d) m away, front-right \((\d+) degrees right\)", old)
    assert m is not None, old
    assert float(m.group(1)) == pytest.approx(4.47, abs=0.2)
    assert int(m.group(2)) == pytest.approx(27, abs=3)
    near = re.search(r"nearest named: blue (\d+\.\d) m", old)
    assert near is not None and float(near.group(1)) == pytest.approx(1.5, abs=0.2)
    assert "- blue last seen 990 s ago." in lines  # a colour only the options name
    assert "- yellow: in none of these frames." in lines
    new = next(line for line in lines if "red object seen 0 s ago" in line)
    assert "guessed" not in new and "seen from about here" in new  # three views crossed


def test_the_object_seen_about_the_time_asked_is_listed_among_many_of_its_colour() -> None:
    """Six red objects seen at six times, each from three places about the origin, each in
    another direction: the block leads with the one seen nearest the "about 10 minutes ago"
    asked for, and keeps the newest."""
    rows = []
    for k in range(6):
        a = math.radians(10 + 20 * k)  # 2 m apart: none is another seen again
        target = (6.0 * math.cos(a), 6.0 * math.sin(a))
        for dt, (x, y) in ((6.0, (1.0, -1.0)), (3.0, (-1.0, -1.0)), (0.0, (0.0, 0.0))):
            bearing = math.degrees(math.atan2(target[1] - y, target[0] - x))
            rows.append(odometry_row(1200.0 - 120.0 * k - dt, x, y, 0.0,
                                     f"I see a small red object to the left ({bearing:.0f} "
                                     "degrees left)."))
    rows.sort(key=lambda r: r.stamp)
    text = memory_text(
        rows, "Where is the red box you saw about 10 minutes ago relative to you now?",
        ["A. front-left", "B. back-left"])
    red = [line for line in _places(text) if line.startswith("- red object")]
    assert len(red) == OBJECTS_PER_COLOUR
    assert "seen 10 min ago" in red[0]  # 600 s before the last frame
    assert any("seen 0 s ago" in line for line in red)
    # a last-seen question's options are ranges, no moment: the newest leads
    text = memory_text(rows, "How long ago did you last see the red box?",
        ["A. less than 1 minute ago", "B. between 1 and 5 minutes ago"])
    assert "seen 0 s ago" in _places(text)[0]


def test_free_text_descriptions_give_no_places_block() -> None:
    """A VLM's free text names objects without bearings: nothing to place them by, and
    saying that they are in no frame would be false."""
    rows = [odometry_row(0.0, 0.0, 0.0, 0.0, "A red car is parked near a tree."),
            odometry_row(60.0, 2.0, 0.0, 0.0, "A red car is parked near a tree, closer now.")]
    text = memory_text(rows, "Where is the red car?", ["A. left"])
    assert PLACES_HEADING not in text
    assert "\n>\nQuestion: Where is the red car?" in text


def test_a_time_phrase_belongs_to_the_colour_named_before_it() -> None:
    question = ("Which is closer to you now: the cyan cone you saw about 18 minutes ago or the "
                "red sphere you saw about 1 minute ago?")
    assert colour_times([question]) == {"cyan": [1080.0], "red": [60.0]}
    # an option's unreadable phrase costs that option's times only; ranges name no moment
    assert colour_times(["Where is the red box you saw about 10 minutes ago?",
                         "A. the blue one seen 5 blorps ago",
                         "B. between 1 and 5 minutes ago"]) == {"red": [600.0]}


@pytest.mark.parametrize("case", ["a row without a pose", "the paper layout"])
def test_places_come_from_the_stored_poses_not_from_the_texts_motions(case: str) -> None:
    """The memory places objects from the poses it stored: a row without a pose between the
    others (its line reads "an unknown motion"), or the paper layout (no ages in the frame
    lines), leaves every place as it was; rows without any pose place nothing (where the
    robot is now is unknown), so there is no block."""
    rows = list(TWO_VISITS)
    layout = "timed"
    if case == "a row without a pose":
        rows.insert(3, MemoryRow(stamp=500.0, description=TWO_VISITS[0].description))
    else:
        layout = "paper"
    question = "Where is the red box you saw about 17 minutes ago?"
    options = ["A. front-left", "B. front-right"]
    text = memory_text(rows, question, options, layout=layout)
    assert _places(text) == _places(memory_text(TWO_VISITS, question, options))
    assert ("an unknown motion" in text) == (case == "a row without a pose")
    unposed = [MemoryRow(stamp=r.stamp, description=r.description) for r in TWO_VISITS]
    assert PLACES_HEADING not in memory_text(unposed, question, options, layout=layout)


def test_a_memory_question_is_read_by_the_memory_reader_and_any_other_by_the_lm() -> None:
    """``reasoning.memory_model`` reads the texts it was trained on, a memory's; the request's
    scope says which LM reads a text, never its words (a window text quoting the places
    heading is still the LM's)."""
    from embodied_r_ros.backends.factory import create_backend, load_pipeline
    from embodied_r_ros.core.profiles import load_config
    from embodied_r_ros.core.request import SCOPE_MEMORY, SCOPE_WINDOW

    config = load_config("tiny", overrides={"cache": {"enabled": False}})
    options = ["A. front-left", "B. front-right"]
    memory = memory_text(TWO_VISITS, "Where is the red box you saw about 17 minutes ago?",
                         options)
    named = config.model_copy(update={"reasoning": config.reasoning.model_copy(
        update={"memory_model": "tiny-qwen2"})})
    assert named.memory_reader() is None  # the memory is off: no text for it to read
    reader = named.model_copy(update={"memory": named.memory.model_copy(
        update={"enabled": True})}).memory_reader()
    assert reader is not None and reader.max_new_tokens == config.reasoning.model.max_new_tokens
    assert config.memory_reader() is None
    lm = create_backend(config.reasoning.model, text_only=True)
    memory_lm = create_backend(reader, text_only=True)
    pipeline = load_pipeline(config, lm=lm, memory_lm=memory_lm, perception=False)
    try:
        assert pipeline.reader_for(SCOPE_MEMORY) is memory_lm
        assert pipeline.reader_for(SCOPE_WINDOW) is lm and pipeline.reader_for() is lm
        seen: list[str] = []
        for backend, name in ((lm, "lm"), (memory_lm, "memory")):
            complete = backend.complete
            backend.complete = (  # type: ignore[method-assign]
                lambda calls, *a, _c=complete, _n=name, **k: seen.append(_n) or _c(calls, *a, **k))
        assert pipeline.reason(memory, options, scope=SCOPE_MEMORY).raw
        assert pipeline.reason(memory, options).raw  # the same words, a window's scope
        assert seen == ["memory", "lm"]
        alone = load_pipeline(config, lm=lm, perception=False)
        assert alone.reader_for(SCOPE_MEMORY) is lm
    finally:
        pipeline.close()
