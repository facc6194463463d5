"""Synthetic test media: a textured canvas seen through a moving window, as video or images."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np


def textured_canvas(h: int, w: int, seed: int = 0) -> np.ndarray:
    """An RGB canvas with blobs, lines and noise: plenty of ORB corners everywhere."""
    rng = np.random.default_rng(seed)
    canvas = cv2.resize(
        rng.integers(0, 255, (h // 8, w // 8, 3), dtype=np.uint8), (w, h),
        interpolation=cv2.INTER_NEAREST,
    )
    for _ in range((h * w) // 4000):
        colour = tuple(int(c) for c in rng.integers(0, 255, 3))
        x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
        if rng.random() < 0.5:
            cv2.circle(canvas, (x, y), int(rng.integers(3, 25)), colour, -1)
        else:
            cv2.rectangle(canvas, (x, y), (x + int(rng.integers(4, 40)),
                                           y + int(rng.integers(4, 40))), colour, -1)
    return canvas


def pan_frames(n: int, step_px: int, size: tuple[int, int] = (320, 240),
               seed: int = 0) -> list[np.ndarray]:
    """``n`` RGB frames of ``size`` (w, h) panning right by ``step_px`` per frame."""
    w, h = size
    canvas = textured_canvas(h, w + step_px * n + 1, seed)
    return [np.ascontiguousarray(canvas[:, i * step_px : i * step_px + w]) for i in range(n)]


def write_video(path: Path, frames: list[np.ndarray], fps: float) -> Path:
    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
    assert writer.isOpened(), "OpenCV cannot write mp4v here"
    for frame in frames:
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def write_images(folder: Path, frames: list[np.ndarray]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, frame in enumerate(frames):
        cv2.imwrite(str(folder / f"frame_{i:04d}.png"), cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    return folder
