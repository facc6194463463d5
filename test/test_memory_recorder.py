"""Key frames into the memory (thumbnail, objects, pose), and the optional embedder: loaded
only with the pinned weights, used for similarity search, and backfilled after a crash."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from embodied_r_ros.core.images import decode_image
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.records import FrameRecord
from embodied_r_ros.core.streaming import KeyFrameNote
from embodied_r_ros.memory import MemoryRecorder, Retriever, SpatialMemoryError, SqliteMemoryStore
from embodied_r_ros.memory import embedder as embedder_module
from embodied_r_ros.memory.embedder import MiniLMEmbedder, load_embedder, verify
from embodied_r_ros.memory.errors import EMBEDDER_UNAVAILABLE


def test_a_recorded_key_frame_keeps_its_pose_objects_and_a_small_thumbnail(
        tmp_path: Path) -> None:
    with SqliteMemoryStore(tmp_path / "m.sqlite3", writable=True) as store:
        recorder = MemoryRecorder(store, "rover-1", thumbnail_side=64)
        image = np.zeros((480, 640, 3), np.uint8)
        image[:, :320] = (200, 30, 30)
        note = KeyFrameNote(camera="front", record=FrameRecord(
            12.5, vlm_action="rotate left", vlm_text="I see a red door and a bench."),
                            previous_stamp=11.0, seconds=0.3)
        row_id = recorder.record_note(note, pose=Pose(1.0, 2.0, 0.0, 30.0),
                                      pose_source="odometry", image=image)
        (row,) = store.get([row_id], thumbnails=True)
    assert (row.robot, row.camera, row.stamp, row.action) == ("rover-1", "front", 12.5,
                                                              "rotate left")
    assert row.objects == ("red door", "bench") and row.pose == Pose(1.0, 2.0, 0.0, 30.0)
    assert row.thumbnail is not None and len(row.thumbnail) < 4096
    assert decode_image(row.thumbnail).shape == (48, 64, 3)


def test_weights_other_than_the_pinned_ones_are_never_loaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "model"
    fake.mkdir()
    for name in embedder_module.PINNED_SHA256:
        (fake / name).write_bytes(b"not the model")
    with pytest.raises(SpatialMemoryError) as err:
        verify(fake)
    assert err.value.code == EMBEDDER_UNAVAILABLE and "SHA-256" in str(err.value)
    monkeypatch.setattr(embedder_module, "model_dir", lambda: fake)
    assert load_embedder("auto") is None  # full-text search alone, one warning
    with pytest.raises(SpatialMemoryError):
        load_embedder("required")
    assert load_embedder("off") is None


@pytest.fixture(scope="module")
def minilm() -> Iterator[MiniLMEmbedder]:
    directory = embedder_module.model_dir()
    if directory is None:
        pytest.skip(f"the embedding model is not installed ({embedder_module.PACKAGE_PIN}; make "
                    "setup installs it)")
    yield MiniLMEmbedder(directory)


def test_the_pinned_model_embeds_similar_descriptions_close(minilm: MiniLMEmbedder) -> None:
    a, b, c = minilm.embed(["a red chair by the door", "I see a red armchair next to the "
                            "doorway", "a blue car parked on the street"])
    assert a.shape == (384,) and abs(float(np.linalg.norm(a)) - 1.0) < 1e-4
    assert float(a @ b) > 0.6 > float(a @ c) + 0.3


def test_similarity_finds_what_full_text_misses_and_a_crash_is_backfilled(
        tmp_path: Path, minilm: MiniLMEmbedder) -> None:
    path = tmp_path / "m.sqlite3"
    with SqliteMemoryStore(path, writable=True) as store:
        recorder = MemoryRecorder(store, embedder=minilm, embed_batch=8)
        for i in range(100):
            text = ("I see a grey couch against the wall." if i == 40 else
                    f"I see an empty corridor with white walls, door {i}.")
            recorder.record(float(i), text)
        # 100 = 12 batches of 8 + 4 pending: a crash now leaves 4 rows without a vector
        assert len(store.missing_vectors("robot", minilm.model_id, 1000)) == 4
    with SqliteMemoryStore(path, writable=True) as store:
        MemoryRecorder(store, embedder=minilm)  # a restart embeds what the crash left
        assert store.missing_vectors("robot", minilm.model_id, 1000) == []
        sel = Retriever(store, budget=8, latest=2, embedder=minilm).select(
            "robot", "Where is the sofa?")
    assert any(r.stamp == 40.0 and "similar" in sel.reasons[r.id or 0] for r in sel.rows)
    with SqliteMemoryStore(path) as reader:  # full-text search alone does not find it
        plain = Retriever(reader, budget=8, latest=2).select("robot", "Where is the sofa?")
    assert not any(r.stamp == 40.0 for r in plain.rows)
