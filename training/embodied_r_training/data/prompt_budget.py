"""Fitting a row's LM prompt into the token budget (the paper's 6144 tokens).

``left`` is what the official runs did: ms-swift's GRPO sets and asserts
``truncation_strategy='left'`` (swift/llm/argument/rlhf_args.py, 3.3.1 and 3.4.0), so a rollout
prompt keeps its LAST ``max_length`` tokens of the chat-templated text and no row is deleted;
what goes first is the start of the text: the system prompt, the instruction and the earliest
frames. Such a prompt is no longer a conversation, so in this mode every row's prompt is the
chat-templated text (what TRL would have rendered from the messages), cut where needed.
``delete`` leaves a longer row out (ms-swift's default for its other trainers), and how many is
reported. ``drop_oldest_frames`` never cuts the question block (without it the reward has
nothing to check): the oldest key frames go first, and the prompt is rendered again by the core
from the row's perception record with the wording the dataset was built with, so a shortened
prompt has exactly the shape of a full one (the first kept frame becomes "Frame 0", the agent's
starting point). A memory's text is not shortened so: its places block was placed from every
frame. Evaluation keeps prompts whole unless ``eval.max_prompt_tokens``
asks otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, get_args

from embodied_r_ros.core.chat import Conversation
from embodied_r_ros.core.perception_text import FrameLayout, render
from embodied_r_ros.core.prompts import PromptSet, prompts_from
from embodied_r_ros.core.reasoning import build_messages
from embodied_r_training.data.dataset_files import BuildError, load_manifest
from embodied_r_training.data.row_records import has_record, record_of

log = logging.getLogger(__name__)

CountFn = Callable[[Conversation], int]
OverLength = Literal["left", "delete", "drop_oldest_frames"]


@dataclass(frozen=True)
class PromptLayout:
    """How a dataset's prompts were written: their wording, whether measured motion shows and
    the layout of the frame lines."""

    prompts: PromptSet
    report_motion: bool = True
    frame_layout: FrameLayout = "timed"


def dataset_layout(data_dir: str | Path) -> PromptLayout:
    """The layout a built dataset's manifest records; a dataset whose manifest names no frame
    layout was built with an older text and is refused (:class:`BuildError`)."""
    manifest = load_manifest(data_dir)
    frame_layout = manifest.get("frame_layout")
    if frame_layout not in get_args(FrameLayout):
        raise BuildError(
            f"{data_dir} was built with perception text of an older layout (its manifest names "
            "no frame_layout): rebuild the dataset (embodied-r-train build or import-*) so that "
            "training and evaluation read the text the robot writes")
    layout = PromptLayout(prompts_from(manifest.get("prompts")),
                          bool(manifest.get("report_motion", True)), frame_layout)
    built = manifest.get("prompt_version")
    if built and built != layout.prompts.version:
        log.warning("%s was built with prompts %s, its prompt file is now %s: shortened prompts "
                    "will use the new wording", data_dir, built, layout.prompts.version)
    return layout


@dataclass(frozen=True)
class FitReport:
    """What fitting did to a split: rows in, rows deleted, rows shortened (frames dropped or
    left-truncated)."""

    rows: int
    deleted: int = 0
    shortened: int = 0

    def summary(self, max_tokens: int) -> str:
        return (f"{self.deleted} of {self.rows} rows deleted and {self.shortened} shortened "
                f"(prompts over {max_tokens} tokens)")


def chat_text(tokenizer: Any, messages: Conversation) -> str:
    """A conversation as the model reads it: chat template + generation prompt."""
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def left_truncate(tokenizer: Any, messages: Conversation, max_tokens: int) -> tuple[str, bool]:
    """``(text, cut)``: the chat-templated prompt, keeping its last ``max_tokens`` tokens
    (ms-swift's ``input_ids[-max_length:]``); re-encoding the cut text never exceeds them."""
    text = chat_text(tokenizer, messages)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) <= max_tokens:
        return text, False
    keep = max_tokens
    while keep > 0:
        cut = tokenizer.decode(ids[-keep:], skip_special_tokens=False)
        if len(tokenizer(cut, add_special_tokens=False)["input_ids"]) <= max_tokens:
            return cut, True
        keep -= 1  # a token boundary that re-encodes longer: cut one more
    raise ValueError(f"cannot fit a prompt into {max_tokens} tokens")


def token_counter(tokenizer: Any) -> CountFn:
    """Tokens of a conversation as the model sees it (chat template + generation prompt)."""

    def count(messages: Conversation) -> int:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return count


def _prompt_without(row: dict[str, Any], drop: int, layout: PromptLayout) -> Conversation:
    record = record_of(row)
    text = render(replace(record, frames=record.frames[drop:]), layout.prompts)
    return build_messages(text, layout.prompts)


def fit_prompt(
    row: dict[str, Any], count: CountFn, max_tokens: int, layout: PromptLayout
) -> tuple[Conversation, int]:
    """``(prompt, frames_dropped)``: the row's prompt, or the longest suffix of its frames that
    fits in ``max_tokens`` (at least the last frame is kept)."""
    prompt = row["prompt"]
    if count(prompt) <= max_tokens:
        return prompt, 0
    if "frames" in row and not has_record(row):
        record_of(row)  # built before records: stops with the line that says to rebuild
    frames = record_of(row).frames if has_record(row) else ()
    if len(frames) < 2 or row["records"].get("places") is not None:
        log.warning("row %s is over %d tokens and has no frames to drop", row.get("id"), max_tokens)
        return prompt, 0
    lo, hi = 1, len(frames) - 1  # binary search the fewest dropped frames that fit
    best = hi
    while lo <= hi:
        mid = (lo + hi) // 2
        if count(_prompt_without(row, mid, layout)) <= max_tokens:
            best, hi = mid, mid - 1
        else:
            lo = mid + 1
    fitted = _prompt_without(row, best, layout)
    if count(fitted) > max_tokens:
        log.warning("row %s does not fit %d tokens even with one frame", row.get("id"), max_tokens)
    return fitted, best


def fit_rows(
    rows: Sequence[dict[str, Any]],
    tokenizer: Any,
    max_tokens: int,
    layout: PromptLayout,
    over_length: OverLength = "delete",
) -> tuple[list[dict[str, Any]], FitReport]:
    """The rows whose prompts fit ``max_tokens``: longer ones left-truncated (every prompt then
    as text), deleted, or shortened by dropping their oldest frames (``over_length``)."""
    count = token_counter(tokenizer)
    out: list[dict[str, Any]] = []
    deleted = shortened = 0
    for row in rows:
        if over_length == "left":
            text, cut = left_truncate(tokenizer, row["prompt"], max_tokens)
            shortened += cut
            out.append({**row, "prompt": text})
            continue
        if over_length == "delete":
            if count(row["prompt"]) > max_tokens:
                deleted += 1
            else:
                out.append(row)
            continue
        prompt, dropped = fit_prompt(row, count, max_tokens, layout)
        shortened += dropped > 0
        out.append({**row, "prompt": prompt})
    report = FitReport(len(rows), deleted, shortened)
    if deleted or shortened:
        log.info("%s", report.summary(max_tokens))
    return out, report
