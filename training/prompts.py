"""Fitting a row's LM prompt into the token budget (the paper's 6144) by dropping old frames.

The question block (question and options) is never cut: without it the reward has nothing to
check. Instead the oldest key frames' descriptions go first, and the prompt is re-assembled by
the core from the row's stored frames, so a shortened prompt has exactly the shape of a full one
(the first kept frame becomes "Frame 0", the agent's starting point).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from embodied_r_ros.core.backends.base import Conversation
from embodied_r_ros.core.perception import FrameDescription, assemble
from embodied_r_ros.core.reasoning import build_messages

log = logging.getLogger(__name__)

CountFn = Callable[[Conversation], int]


def token_counter(tokenizer: Any) -> CountFn:
    """Tokens of a conversation as the model sees it (chat template + generation prompt)."""

    def count(messages: Conversation) -> int:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return count


def _prompt_without(row: dict[str, Any], drop: int, report_motion: bool) -> Conversation:
    frames = [FrameDescription(**f) for f in row["frames"][drop:]]
    return build_messages(assemble(frames, row["question_block"], report_motion))


def fit_prompt(
    row: dict[str, Any], count: CountFn, max_tokens: int, *, report_motion: bool = True
) -> tuple[Conversation, int]:
    """``(prompt, frames_dropped)``: the row's prompt, or the longest suffix of its frames that
    fits in ``max_tokens`` (at least the last frame is kept)."""
    prompt = row["prompt"]
    if count(prompt) <= max_tokens:
        return prompt, 0
    frames = row.get("frames") or []
    if not frames or "question_block" not in row:
        log.warning("row %s is over %d tokens and has no frames to drop", row.get("id"), max_tokens)
        return prompt, 0
    lo, hi = 1, len(frames) - 1  # binary search the fewest dropped frames that fit
    best = hi
    while lo <= hi:
        mid = (lo + hi) // 2
        if count(_prompt_without(row, mid, report_motion)) <= max_tokens:
            best, hi = mid, mid - 1
        else:
            lo = mid + 1
    fitted = _prompt_without(row, best, report_motion)
    if count(fitted) > max_tokens:
        log.warning("row %s does not fit %d tokens even with one frame", row.get("id"), max_tokens)
    return fitted, best


def fit_rows(
    rows: Sequence[dict[str, Any]],
    tokenizer: Any,
    max_tokens: int,
    *,
    report_motion: bool = True,
) -> tuple[list[dict[str, Any]], int]:
    """Rows with fitted prompts and how many rows lost frames."""
    count = token_counter(tokenizer)
    out, shortened = [], 0
    for row in rows:
        prompt, dropped = fit_prompt(row, count, max_tokens, report_motion=report_motion)
        shortened += dropped > 0
        out.append({**row, "prompt": prompt})
    if shortened:
        log.info("%d of %d prompts shortened to %d tokens", shortened, len(rows), max_tokens)
    return out, shortened
