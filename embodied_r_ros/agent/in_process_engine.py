"""The in-process :class:`~embodied_r_ros.agent.query_runner.Engine` of the all-in-one process:
frames straight from the frame buffers' stores (already decoded), models straight from the
perception and reasoning nodes of the same process (``BACKEND_DOWN`` while one is not active).
Perception is the core's :meth:`~embodied_r_ros.core.pipeline.EmbodiedR.perceive_window`, the
call that ``embodied-r-train build`` makes for a bag window."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from embodied_r_ros.agent.frame_store import Window
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.perception import ProgressFn
from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.core.poses import StampedPose
from embodied_r_ros.core.reasoning import Reasoning
from embodied_r_ros.core.request import SCOPE_WINDOW, Question

WindowFn = Callable[[float], Window]
PoseNowFn = Callable[[], StampedPose | None]
PipelineFn = Callable[[], EmbodiedR]
#: the reasoning node's ``reason`` (publishes the prompt on its debug topic)
#: (perception text, options, cancel, scope) -> the reasoning LM's answer
ReasonFn = Callable[[str, Sequence[str], CancelToken, str], Reasoning]


class LocalEngine:
    def __init__(
        self,
        windows: Mapping[str, WindowFn],
        perception: PipelineFn,
        reasoning: ReasonFn,
        poses: Mapping[str, PoseNowFn] | None = None,
    ) -> None:
        """``poses``: each camera's pose now (its frame store's ``pose_now``)."""
        self.windows = dict(windows)
        self.perception = perception
        self.reasoning = reasoning
        self.poses = dict(poses or {})

    def window(self, camera: str, window_sec: float, cancel: CancelToken) -> Window:
        return self.windows[camera](window_sec)

    def pose_now(self, camera: str, cancel: CancelToken) -> StampedPose | None:
        pose_now = self.poses.get(camera)
        return None if pose_now is None else pose_now()

    def perceive(
        self,
        window: Window,
        question: Question,
        on_progress: ProgressFn | None,
        cancel: CancelToken,
    ) -> str:
        result = self.perception().perceive_window(
            window.decoded(),
            window.stamps,
            question,
            window.motions,
            on_progress=on_progress,
            cancel=cancel,
        )
        return result.text

    def reason(self, perception: str, question: Question, cancel: CancelToken,
               scope: str = SCOPE_WINDOW) -> Reasoning:
        return self.reasoning(perception, question.options, cancel, scope)
