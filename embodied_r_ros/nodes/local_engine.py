"""The in-process :class:`~embodied_r_ros.nodes.query.Engine` of the all-in-one process: frames
straight from the frame buffers' stores, models straight from the shared :class:`EmbodiedR`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from embodied_r_ros.core.perception import ProgressFn
from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.core.reasoning import Reasoning
from embodied_r_ros.nodes.frame_store import Window
from embodied_r_ros.nodes.motion import perceive_window

WindowFn = Callable[[float], Window]


class LocalEngine:
    def __init__(self, windows: Mapping[str, WindowFn], pipeline: EmbodiedR) -> None:
        self.windows = dict(windows)
        self.pipeline = pipeline

    def window(self, camera: str, window_sec: float) -> Window:
        return self.windows[camera](window_sec)

    def perceive(
        self,
        window: Window,
        question: str,
        options: Sequence[str],
        on_progress: ProgressFn | None,
        cancelled: Callable[[], bool],
    ) -> str:
        result = perceive_window(
            self.pipeline,
            window.images,
            window.stamps,
            question,
            options,
            window.motions,
            on_progress=on_progress,
            cancelled=cancelled,
        )
        return result.text

    def reason(self, perception: str, options: Sequence[str]) -> Reasoning:
        return self.pipeline.reason(perception, options)
