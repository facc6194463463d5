"""Small rosbag2 recordings for tests, written with rosbags (no ROS needed).

A camera pans over a textured canvas while odometry reports a yaw turning left, so key frames,
odometry motions and both image message types can be checked against known values.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import cv2
import numpy as np
from media import pan_frames

from embodied_r_ros.core.poses import Pose

T0_NS = 1_700_000_000_000_000_000
FPS = 4.0


def write_bag(
    path: Path,
    *,
    n_frames: int = 24,
    storage: str = "mcap",
    compressed: bool = False,
    odom: bool = True,
    camera_info: bool = True,
    step_px: int = 12,
    size: tuple[int, int] = (160, 120),
    yaw_deg_per_frame: float = 3.0,
) -> Path:
    """Write a bag at ``path`` (a directory) and return it."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_JAZZY)
    types = ts.types
    Header, Time = types["std_msgs/msg/Header"], types["builtin_interfaces/msg/Time"]
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    frames = pan_frames(n_frames, step_px, size)
    period_ns = int(1e9 / FPS)
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        img_type = "sensor_msgs/msg/CompressedImage" if compressed else "sensor_msgs/msg/Image"
        cam = writer.add_connection("/camera/image_raw", img_type, typestore=ts)
        add = writer.add_connection
        odo = add("/odom", "nav_msgs/msg/Odometry", typestore=ts) if odom else None
        info_type = "sensor_msgs/msg/CameraInfo"
        info = add("/camera/camera_info", info_type, typestore=ts) if camera_info else None
        for i, frame in enumerate(frames):
            t = T0_NS + i * period_ns
            header = Header(stamp=Time(sec=t // 10**9, nanosec=t % 10**9), frame_id="camera")
            if compressed:
                ok, jpg = cv2.imencode(".jpg", cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
                assert ok
                msg = types[img_type](header=header, format="jpeg", data=jpg.reshape(-1))
            else:
                h, w = frame.shape[:2]
                msg = types[img_type](
                    header=header, height=h, width=w, encoding="rgb8", is_bigendian=0,
                    step=w * 3, data=frame.reshape(-1),
                )
            writer.write(cam, t, ts.serialize_cdr(msg, img_type))
            if odo is not None:
                pose = Pose(x=0.1 * i, yaw_deg=yaw_deg_per_frame * i)
                writer.write(odo, t, ts.serialize_cdr(_odometry(types, header, pose), odo.msgtype))
            if info is not None and i == 0:
                data = ts.serialize_cdr(_camera_info(types, header, size), info_type)
                writer.write(info, t, data)
    return path


def _odometry(types: dict, header: object, pose: Pose) -> object:
    geo = "geometry_msgs/msg/"
    qx, qy, qz, qw = pose.quaternion()
    p = types[geo + "Pose"](
        position=types[geo + "Point"](x=pose.x, y=pose.y, z=pose.z),
        orientation=types[geo + "Quaternion"](x=qx, y=qy, z=qz, w=qw),
    )
    twist = types[geo + "Twist"](
        linear=types[geo + "Vector3"](x=0.0, y=0.0, z=0.0),
        angular=types[geo + "Vector3"](x=0.0, y=0.0, z=0.0),
    )
    return types["nav_msgs/msg/Odometry"](
        header=header,
        child_frame_id="base_link",
        pose=types[geo + "PoseWithCovariance"](pose=p, covariance=np.zeros(36)),
        twist=types[geo + "TwistWithCovariance"](twist=twist, covariance=np.zeros(36)),
    )


def _camera_info(types: dict, header: object, size: tuple[int, int]) -> object:
    w, h = size
    f = 0.5 * w / math.tan(math.radians(35.0))
    return types["sensor_msgs/msg/CameraInfo"](
        header=header, height=h, width=w, distortion_model="plumb_bob",
        d=np.zeros(5), k=np.array([f, 0, w / 2, 0, f, h / 2, 0, 0, 1], float),
        r=np.eye(3).reshape(-1), p=np.array([f, 0, w / 2, 0, 0, f, h / 2, 0, 0, 0, 1, 0], float),
        binning_x=0, binning_y=0,
        roi=types["sensor_msgs/msg/RegionOfInterest"](
            x_offset=0, y_offset=0, height=0, width=0, do_rectify=False
        ),
    )


def write_questions(path: Path, n: int = 4, *, scenes: int = 1) -> Path:
    """Question rows in the sample world's format, each over a window of the test bag."""
    rows = []
    for i in range(n):
        start = T0_NS + (i % 2) * int(1e9)
        end = start + int(4e9)
        letter = "ABCD"[i % 4]
        rows.append(
            {
                "id": f"q{i}",
                "scene_seed": i % scenes,
                "category": ["rotation", "motion"][i % 2],
                "question": f"Which way did you turn in segment {i}?",
                "options": ["A. left", "B. right", "C. up", "D. down"],
                "answer": letter,
                "answer_text": {"A": "left", "B": "right", "C": "up", "D": "down"}[letter],
                "t_start": (start - T0_NS) / 1e9,
                "t_end": (end - T0_NS) / 1e9,
                "stamp_start_ns": start,
                "stamp_end_ns": end,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def built_dataset(root: Path) -> Path:
    """``write_bag`` (28 frames) + 8 questions built into ``root/ds`` by the real ``build``."""
    from embodied_r_training.cli import main

    bag = write_bag(root / "bag", n_frames=28)
    questions = write_questions(root / "q.jsonl", n=8)
    out = root / "ds"
    assert main(["build", "--bag", str(bag), "--questions", str(questions), "--image-topic",
                 "/camera/image_raw", "--odom-topic", "/odom", "--out", str(out), "--split-by",
                 "question", "--folds", "0", "--no-progress", "--cache-dir",
                 str(root / "cache")]) == 0
    return out
