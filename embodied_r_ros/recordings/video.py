"""Reading egocentric video from files: a video container or a folder of images.

Frames come out as ``(rgb_image, stamp_seconds)`` so that files, live ROS streams and bags all
feed the key-frame extractor the same way (by timestamp).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


class VideoError(ValueError):
    """A video that cannot be read; the message is one line naming the file."""


def _capture(path: Path) -> cv2.VideoCapture:
    # FFmpeg's own messages ("moov atom not found") would come before our one-line error;
    # AV_LOG_QUIET unless the user asked for them (read when the first capture opens)
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    return cv2.VideoCapture(str(path))


def _iter_container(path: Path) -> Iterator[tuple[np.ndarray, float]]:
    cap = _capture(path)
    if not cap.isOpened():
        raise VideoError(f"cannot open video {path}: not a readable video file")
    fps = cap.get(cv2.CAP_PROP_FPS)
    if not fps or not np.isfinite(fps) or fps <= 0:
        fps = 30.0
    index = 0
    try:
        while True:
            ok, frame = cap.read()
            if not ok:
                break
            yield cv2.cvtColor(frame, cv2.COLOR_BGR2RGB), index / fps
            index += 1
    finally:
        cap.release()
    if index == 0:
        raise VideoError(f"video {path} has no decodable frames")


def _iter_folder(path: Path, fps: float) -> Iterator[tuple[np.ndarray, float]]:
    for i, file in enumerate(_images_in(path)):
        bgr = cv2.imread(str(file), cv2.IMREAD_COLOR)
        if bgr is None:
            raise VideoError(f"cannot decode image {file}")
        yield cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), i / fps


def _images_in(path: Path) -> list[Path]:
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise VideoError(f"folder {path} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    return files


def probe_video(path: str | Path, input_fps: float = 1.0) -> None:
    """Fail fast (VideoError, one line) unless ``path`` opens and its first frame decodes:
    checked before any model loads, in milliseconds."""
    p = Path(path)
    if not p.exists():
        raise VideoError(f"no such file or folder: {p}")
    if p.is_dir():
        if not math.isfinite(input_fps) or input_fps <= 0:
            raise VideoError(f"--input-fps must be a positive number, got {input_fps}")
        first = _images_in(p)[0]
        if cv2.imread(str(first), cv2.IMREAD_COLOR) is None:
            raise VideoError(f"cannot decode image {first}")
        return
    if p.stat().st_size == 0:
        raise VideoError(f"video {p} is empty (0 bytes)")
    cap = _capture(p)
    try:
        if not cap.isOpened():
            raise VideoError(f"cannot open video {p}: not a readable video file (cut short?)")
        ok, _ = cap.read()
        if not ok:
            raise VideoError(f"video {p} has no decodable frames")
    finally:
        cap.release()


def iter_frames(path: str | Path, input_fps: float = 1.0) -> Iterator[tuple[np.ndarray, float]]:
    """Frames of a video file or image folder (sorted by name, ``input_fps`` apart).

    Errors are raised lazily as :class:`VideoError`; a missing path fails at once.
    """
    p = Path(path)
    if not p.exists():
        raise VideoError(f"no such file or folder: {p}")
    if p.is_dir():
        if not math.isfinite(input_fps) or input_fps <= 0:
            raise VideoError(f"--input-fps must be a positive number, got {input_fps}")
        return _iter_folder(p, input_fps)
    if p.stat().st_size == 0:
        raise VideoError(f"video {p} is empty (0 bytes)")
    return _iter_container(p)
