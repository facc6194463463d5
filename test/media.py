"""Synthetic test media: a textured canvas seen through a moving window, as video or images."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np


def texture(height: int, width: int, seed: int) -> np.ndarray:
    """RGB noise at several scales plus random filled shapes: plenty of ORB corners."""
    rng = np.random.default_rng(seed)
    img = np.zeros((height, width, 3), np.float32)
    for cell, weight in ((8, 0.5), (32, 0.3), (128, 0.2)):
        small = rng.random((height // cell + 1, width // cell + 1, 3), dtype=np.float32)
        img += weight * cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
    out = np.clip(img * 255, 0, 255).astype(np.uint8)
    for _ in range(height * width // 1500):
        x, y = int(rng.integers(0, width)), int(rng.integers(0, height))
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        r = int(rng.integers(3, 16))
        if rng.random() < 0.5:
            cv2.rectangle(out, (x, y), (x + r, y + int(rng.integers(3, 16))), color, -1)
        else:
            cv2.circle(out, (x, y), r, color, -1)
    return out


def pan_frames(n: int, step_px: int, size: tuple[int, int] = (320, 240),
               seed: int = 0) -> list[np.ndarray]:
    """``n`` RGB frames of ``size`` (w, h) panning right by ``step_px`` per frame."""
    w, h = size
    canvas = texture(h, w + step_px * n + 1, seed)
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
