"""The transformers backend in process, on the tiny random models: generation, batching,
images, refusals, cancel and health; and image data URLs."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from http_helpers import (
    QUESTIONS,
    openai_cfg,
    text_convs,
    user,
)

from embodied_r_ros.backends import create_backend
from embodied_r_ros.backends.images import from_data_url, to_data_url
from embodied_r_ros.backends.openai_backend import OpenAIBackend
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError, ChatBackend
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_DOWN, BACKEND_FAILED, CANCELLED
from embodied_r_ros.core.images import resize_max_side


def test_greedy_is_deterministic(
    tiny_lm: ChatBackend, tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]
) -> None:
    convs = text_convs(3)
    first = tiny_lm.generate(convs)
    assert tiny_lm.generate(convs) == first
    fresh = create_backend(tiny_config("tiny-qwen2"), cache_dir=tiny_models_dir)
    assert fresh.generate(convs) == first
    assert all(isinstance(r, str) for r in first) and any(first)


def test_batches_keep_order_and_match_unbatched(
    tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]
) -> None:
    backend = create_backend(tiny_config("tiny-qwen2", batch_size=2), cache_dir=tiny_models_dir)
    convs = text_convs(5)  # 2 + 2 + 1, prompts of different lengths -> left padding
    batched = backend.generate(convs)
    single = [backend.generate([c])[0] for c in convs]
    assert len(batched) == 5
    assert batched == single
    assert len(set(batched)) > 1  # replies depend on the prompt, so order is checked


def test_max_new_tokens_is_respected(tiny_lm: Any) -> None:
    convs = text_convs(4)
    short = tiny_lm.generate_ids(convs, max_new_tokens=3)
    longer = tiny_lm.generate_ids(convs, max_new_tokens=10)
    assert all(len(ids) <= 3 for ids in short)
    assert max(len(ids) for ids in longer) > 3
    # a shorter budget is a prefix of the longer greedy completion
    for a, b in zip(short, longer, strict=True):
        assert b[: len(a)] == a
    assert tiny_lm.generate(convs, max_new_tokens=3) == tiny_lm.tokenizer.batch_decode(
        short, skip_special_tokens=True
    )


def test_sampling_is_seeded_and_leaves_global_rng_alone(
    tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]
) -> None:
    import torch

    convs = text_convs(2)

    def sample(seed: int) -> list[list[str]]:
        cfg = tiny_config("tiny-qwen2", temperature=1.0, seed=seed, max_new_tokens=16)
        backend = create_backend(cfg, cache_dir=tiny_models_dir)
        return [backend.generate(convs), backend.generate(convs)]

    state = torch.get_rng_state()
    run_a, run_b, other = sample(0), sample(0), sample(1)
    assert torch.equal(torch.get_rng_state(), state)
    assert run_a == run_b  # a fresh backend with the same seed replays the same samples
    assert run_a[0] != run_a[1]  # successive calls draw differently
    assert run_a != other


def test_vlm_accepts_one_and_two_images(tiny_vlm: ChatBackend, rgb_frames: list[np.ndarray]):
    first, second = rgb_frames
    convs = [
        user("What is ahead?", [first]),
        user("What changed?", [first, second]),
        user("What is ahead?"),
    ]
    replies = tiny_vlm.generate(convs)
    assert len(replies) == 3 and all(isinstance(r, str) for r in replies)
    assert replies == [tiny_vlm.generate([c])[0] for c in convs]  # batching with images
    # the pixels reach the model: another image changes the greedy reply
    assert tiny_vlm.generate([user("What is ahead?", [second])])[0] != replies[0]


def test_image_processor_expands_one_placeholder_per_vision_token(
    tiny_vlm: Any, rgb_frames: list[np.ndarray]
) -> None:
    enc = tiny_vlm.encode([user("a", rgb_frames[:1]), user("b", rgb_frames)])
    grid = enc["image_grid_thw"]
    assert grid.shape == (3, 3)
    merge = tiny_vlm.processor.image_processor.merge_size**2
    image_id = tiny_vlm.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    per_row = (enc["input_ids"] == image_id).sum(dim=1).tolist()
    tokens = (grid.prod(-1) // merge).tolist()
    assert per_row == [tokens[0], tokens[1] + tokens[2]]
    assert enc["mm_token_type_ids"].sum().item() == sum(tokens)
    assert enc["attention_mask"][0, 0].item() == 0  # shorter row is left-padded


def test_text_model_refuses_images(tiny_lm: ChatBackend, rgb_frames: list[np.ndarray]) -> None:
    assert tiny_lm.supports_images is False
    with pytest.raises(BackendError) as err:
        tiny_lm.generate([user("what?", rgb_frames[:1])])
    assert err.value.code == BACKEND_FAILED and "does not accept images" in str(err.value)


def test_malformed_parts_are_refused_before_any_work(tiny_vlm: ChatBackend) -> None:
    offline_client = OpenAIBackend(openai_cfg("http://127.0.0.1:9/v1"))  # never contacted
    bad = [
        user("x", [np.zeros((8, 8), np.uint8)]),  # not H x W x 3
        [{"role": "user", "content": [{"type": "video", "video": "clip.mp4"}]}],
        [{"role": "user", "content": 42}],
    ]
    for backend in (tiny_vlm, offline_client):
        for conv in bad:
            with pytest.raises(BackendError) as err:
                backend.generate([conv])
            assert err.value.code == BACKEND_FAILED
    # the caller's mistake, not the model's: the backend stays healthy
    assert tiny_vlm.health().ok, tiny_vlm.health().error


def test_text_parts_reach_text_only_models(tiny_lm: ChatBackend) -> None:
    as_parts = [{"role": "user", "content": [{"type": "text", "text": QUESTIONS[0]}]}]
    as_string = [{"role": "user", "content": QUESTIONS[0]}]
    assert tiny_lm.generate([as_parts]) == tiny_lm.generate([as_string])


def test_unavailable_model_fails_in_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import huggingface_hub.constants

    # equivalent of HF_HUB_OFFLINE=1 (read at import time): no 25 s of hub retries
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    for name in ("Qwen/Qwen2.5-VL-3B-Instruct-not-cached", str(tmp_path / "missing")):
        with pytest.raises(BackendError) as err:
            create_backend(ModelConfig(model=name))
        assert err.value.code == BACKEND_FAILED
        assert f"'{name}'" in str(err.value) and "\n" not in str(err.value)


def test_vllm_missing_is_a_clear_error() -> None:
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vllm is installed")
    with pytest.raises(BackendError) as err:
        create_backend(ModelConfig(backend="vllm", model="tiny-qwen2"))
    assert err.value.code == BACKEND_DOWN
    assert str(err.value) == "backend 'vllm' needs the optional extra: pip install -e .[vllm]"


def test_importing_backends_does_not_import_torch() -> None:
    code = (
        "import sys, embodied_r_ros.backends, embodied_r_ros.serving, "
        "embodied_r_ros.backends.openai_backend; "
        "assert not {'torch', 'transformers', 'vllm'} & set(sys.modules), 'heavy import'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_in_process_generation_stops_when_cancelled(
    tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]
) -> None:
    backend = create_backend(tiny_config("tiny-qwen2", max_new_tokens=4000, batch_size=1),
                             cache_dir=tiny_models_dir)
    token = CancelToken()
    steps: list[bool] = []  # per forward pass (one a new token): was the token cancelled yet?
    hook = backend.model.register_forward_hook(lambda *_: steps.append(token.stopped))
    threading.Timer(0.3, token.cancel).start()
    try:
        with pytest.raises(BackendError) as err:
            backend.complete(text_convs(1), cancel=token)
    finally:
        hook.remove()
    assert err.value.code == CANCELLED
    # it was generating when the cancel came, and stopped within a step of it, far from 4000
    assert steps and not steps[0] and steps.count(True) <= 1, (len(steps), steps.count(True))
    assert backend.healthy()  # a cancel is not a failure


def test_a_deactivation_stop_is_not_recorded_as_the_models_failure(tiny_lm: ChatBackend) -> None:
    """A node deactivated mid-call stops it with BACKEND_DOWN for its client; the in-process
    model did nothing wrong and must not read unhealthy after reactivation."""
    token = CancelToken()
    token.cancel(BACKEND_DOWN, "the perception node was deactivated")
    with pytest.raises(BackendError) as err:
        tiny_lm.complete(text_convs(1), cancel=token)
    assert err.value.code == BACKEND_DOWN and "deactivated" in str(err.value)
    assert tiny_lm.healthy(), tiny_lm.health()


def test_counting_tokens_in_another_thread_does_not_unpad_a_batch(tiny_lm: Any) -> None:
    """A server counts each request's tokens in its handler thread while the batcher encodes a
    padded batch: the fast tokenizer's padding is shared state, and an unpadded count must not
    switch it off mid-encode (a ragged batch: 'Unable to create tensor'). Thread switches are
    made very frequent so that the interleaving, rare under real load, shows up within this
    test."""
    batch = [[{"role": "user", "content": "short"}],
             [{"role": "user", "content": "a much longer question " * 30}]]
    errors: list[str] = []

    def encode() -> None:
        for _ in range(300):
            try:
                tiny_lm.encode(batch)
            except ValueError as exc:
                errors.append(str(exc))

    def count() -> None:
        for _ in range(600):
            tiny_lm.count_prompt_tokens(batch[0])

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=encode), threading.Thread(target=count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


def test_data_url_round_trip_keeps_rgb_order() -> None:
    image = np.zeros((60, 80, 3), np.uint8)
    image[..., 0] = 200  # pure red
    back = from_data_url(to_data_url(image))
    assert back.shape == image.shape
    assert back[..., 0].mean() > 190 and back[..., 2].mean() < 10
    small = from_data_url(to_data_url(np.zeros((480, 640, 3), np.uint8), max_side=64))
    assert small.shape == (48, 64, 3)
    assert resize_max_side(image, 0) is image
    with pytest.raises(ValueError):
        from_data_url("https://example.com/a.jpg")


def test_an_in_process_failure_is_unhealthy_until_a_call_succeeds(
    tiny_lm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OOM in generate makes the backend unhealthy until a call succeeds."""
    real = tiny_lm.model.generate

    def oom(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(tiny_lm.model, "generate", oom)
    with pytest.raises(BackendError, match="out of memory"):
        tiny_lm.generate(text_convs(1))
    assert not tiny_lm.healthy() and "out of memory" in tiny_lm.health().error
    monkeypatch.setattr(tiny_lm.model, "generate", real)
    tiny_lm.generate(text_convs(1))
    assert tiny_lm.healthy()
