"""What the in-process engine backends' tests share: short chats with a common system turn, and
a cancel token that stops from its n-th check on."""

from __future__ import annotations

from embodied_r_ros.core.cancel import CancelToken

SYSTEM = "You are a helpful assistant. Observe the scene and answer."
QUESTIONS = ["How far is the chair from the table?", "Which object is closest to the agent?",
             "After rotate left, what appears ahead?"]


def chat(question: str) -> list[dict[str, str]]:
    """``question`` after the shared system turn (whose tokens an engine may keep cached)."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


class StopsAfter(CancelToken):
    """A token that reports ``why`` from its ``after``-th check on, as a cancel or a deadline
    arriving mid-generation would; ``checks`` counts how often generation looked at it."""

    def __init__(self, after: int, why: tuple[str, str]) -> None:
        super().__init__()
        self.after, self.why, self.checks = after, why, 0

    def reason(self) -> tuple[str, str] | None:
        self.checks += 1
        return self.why if self.checks >= self.after else None
