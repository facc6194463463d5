"""Perception texts as datasets written before the typed record hold them: a prompt and nothing
else. The rule reader and the rationales still read such rows (through the one reader of old
texts), so their tests can state a text line by line."""

from __future__ import annotations

from embodied_r_ros.core.prompts import default_prompts
from embodied_r_ros.core.reasoning import build_messages, format_question


def old_text(frames: list[tuple[str | None, str]], question_block: str,
             ages: list[float] | None = None) -> str:
    """``Frame i: After <action>, Observe: <view>`` lines (frame 0 without an action), with
    ``(N s before the last key frame)`` where ``ages`` are given, in the LM's user message."""
    p = default_prompts()
    lines = []
    for i, (action, view) in enumerate(frames):
        head = f"Frame {i}" + (f" ({ages[i]:.0f} s before the last key frame)" if ages else "")
        lines.append(f"{head}: Observe: {view}" if i == 0 else
                     f"{head}: After {action or 'None'}, Observe: {view}")
    video = "\n".join(lines)
    return f"{p.lm_instruction}\nVideo content:\n<\n{p.preamble}\n{video}\n>\n{question_block}"


def old_row(frames: list[tuple[str | None, str]], question: str, options: list[str],
            category: str, solution: str = "A", ages: list[float] | None = None) -> dict:
    """A dataset row of such a text (no ``records``)."""
    block = format_question(question, options)
    return {"prompt": build_messages(old_text(frames, block, ages)), "options": options,
            "category": category, "solution": solution, "question": question,
            "question_block": block}
