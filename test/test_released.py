"""The released reasoner (``EmbodiedCity/Embodied-R``) as the profiles run it, on tiny random
checkpoints laid out as the hub holds it (``released_repo.py``): a run chosen by one key, loaded
as its text decoder without the vision tower, prompted as the official batch inference, and
answering through transformers, through the OpenAI-compatible server, and through llama.cpp
with the same greedy tokens."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from http_helpers import free_port
from media import pan_frames
from released_repo import COMMIT, greedy_tokens

from embodied_r_ros.backends import create_backend
from embodied_r_ros.backends.checkpoints import RELEASED_REPO
from embodied_r_ros.backends.factory import load_pipeline
from embodied_r_ros.core.answers import official_eval_letter
from embodied_r_ros.core.chat import BackendError, ChatBackend, Completion, Conversation
from embodied_r_ros.core.config import CONFIG_DIR, ConfigError, ModelConfig
from embodied_r_ros.core.profiles import load_config
from embodied_r_ros.core.prompts import load_prompts, prompts_from
from embodied_r_ros.core.request import validate_query
from embodied_r_training.cli import main as train_main

OPTIONS = ["A. rotate left", "B. rotate right"]
RELEASED_SYSTEM = load_prompts(CONFIG_DIR / "prompts-released.yaml").system


def released(**settings: Any) -> ModelConfig:
    fields: dict[str, Any] = {"model": RELEASED_REPO, "dtype": "float32", "device": "cpu",
                              "max_new_tokens": 24}
    return ModelConfig(**{**fields, **settings})


def snapshot(hub: Path) -> Path:
    return hub / f"models--{RELEASED_REPO.replace('/', '--')}" / "snapshots" / COMMIT


def embedding(lm: Any) -> torch.Tensor:
    return lm.model.get_input_embeddings().weight.detach().clone()


@pytest.fixture(scope="module")
def frames() -> list[tuple]:
    return [(f, i / 10.0) for i, f in enumerate(pan_frames(41, 8))]


class Recorded(ChatBackend):
    """A real backend whose conversations are recorded."""

    def __init__(self, inner: ChatBackend) -> None:
        self.inner, self.model_id, self.seen = inner, inner.model_id, []
        self._lock = threading.Lock()

    def complete(self, conversations: Sequence[Conversation], **settings: Any
                 ) -> list[Completion]:
        with self._lock:
            self.seen += list(conversations)
        return self.inner.complete(conversations, **settings)


def test_the_system_prompt_is_the_official_batch_inferences() -> None:
    """Verbatim from infer/batch_inference.py, its trailing "User: . Assistant:" kept; every
    other template is the project's."""
    assert RELEASED_SYSTEM.startswith("A conversation between User and Assistant. ")
    assert "<think> reasoning process here </think> \n<answer> answer here </answer>." in (
        RELEASED_SYSTEM)
    assert "Ensure that your answer is consistent with and directly derived from your " \
           "thinking process" in RELEASED_SYSTEM
    assert RELEASED_SYSTEM.endswith("between the two sections. User: . Assistant:")
    ours, theirs = prompts_from(None), load_prompts(CONFIG_DIR / "prompts-released.yaml")
    assert ours.pair == theirs.pair and ours.system != theirs.system
    assert ours.version != theirs.version  # caches never mix the two


def test_a_prompts_file_extends_another_and_bad_chains_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(
        f"base: {CONFIG_DIR / 'prompts-released.yaml'}\nname: mine\npreamble: Frames follow.\n")
    mine = load_prompts(tmp_path / "mine.yaml")
    assert (mine.name, mine.preamble, mine.system) == ("mine", "Frames follow.", RELEASED_SYSTEM)
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    (tmp_path / "c.yaml").write_text("base: missing.yaml\n")
    for name, words in (("a.yaml", "cycles"), ("c.yaml", "cannot read prompts")):
        with pytest.raises(ConfigError, match=words) as err:
            load_prompts(tmp_path / name)
        assert "\n" not in str(err.value)


class SliceSpy:
    """A lazy tensor slice that records its name when its data is read."""

    def __init__(self, name: str, inner: Any, read: list[str]) -> None:
        self.name, self.inner, self.read = name, inner, read

    def __getitem__(self, index: Any) -> Any:
        self.read.append(self.name)
        return self.inner[index]

    def __getattr__(self, attribute: str) -> Any:  # shape and dtype are not data
        return getattr(self.inner, attribute)


class ReadSpy:
    """``safe_open`` that records the tensors whose data is read (a lazy slice only when it is
    indexed)."""

    read: list[str] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from safetensors import safe_open

        self.inner = safe_open(*args, **kwargs)

    def __enter__(self) -> ReadSpy:
        self.inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.__exit__(*exc)

    def get_slice(self, name: str) -> Any:
        return SliceSpy(name, self.inner.get_slice(name), self.read)

    def get_tensor(self, name: str) -> Any:
        self.read.append(name)
        return self.inner.get_tensor(name)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.inner, attribute)


def test_each_released_run_loads_text_only(released_hub: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``subfolder`` picks the run (Weight_1 when unset); the vision tower is never built, its
    weights are never read, and the loaded model holds exactly the checkpoint's non-vision
    parameters."""
    from transformers import AutoModelForImageTextToText, modeling_utils
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl

    full = AutoModelForImageTextToText.from_pretrained(snapshot(released_hub) / "Weight_1")
    text_params = sum(p.numel() for n, p in full.named_parameters() if "visual" not in n)
    assert text_params < sum(p.numel() for p in full.parameters())

    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("the vision tower was built")

    monkeypatch.setattr(modeling_qwen2_5_vl.Qwen2_5_VisionTransformerPretrainedModel,
                        "__init__", refuse)
    monkeypatch.setattr(modeling_utils, "safe_open", ReadSpy)
    monkeypatch.setattr(ReadSpy, "read", [])
    weights = {}
    for run in (None, "Weight_1", "Weight_2"):
        lm = create_backend(released(subfolder=run), text_only=True)
        names = [n for n, _ in lm.model.named_parameters()]
        assert not any("visual" in n for n in names) and not lm.supports_images
        assert sum(p.numel() for p in lm.model.parameters()) == text_params
        weights[run] = embedding(lm)
        lm.close()
    assert ReadSpy.read and not [name for name in ReadSpy.read if "visual" in name]
    assert torch.equal(weights[None], weights["Weight_1"])  # the default run
    assert not torch.equal(weights["Weight_1"], weights["Weight_2"])  # another run
    assert torch.equal(weights["Weight_1"], full.get_input_embeddings().weight)


def test_a_checkpoint_at_the_root_or_in_a_folder_loads_alike(released_hub: Path,
                                                             tmp_path: Path) -> None:
    copy = tmp_path / "Embodied-R-Weight_2"
    shutil.copytree(snapshot(released_hub) / "Weight_2", copy)
    at_root = create_backend(released(model=str(copy)), text_only=True)
    in_folder = create_backend(released(model=str(snapshot(released_hub)),
                                        subfolder="Weight_2"), text_only=True)
    assert torch.equal(embedding(at_root), embedding(in_folder))
    with pytest.raises(BackendError) as err:  # the released repository has none at its root
        create_backend(released(subfolder=""), text_only=True)
    assert "Weight_1, Weight_2" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(BackendError) as err:
        create_backend(released(revision="no-such-branch"), text_only=True)
    assert "not in the hub cache" in str(err.value) and "\n" not in str(err.value)


def test_the_workstation_profile_answers_with_it_through_transformers(
    released_hub: Path, frames: list[tuple]
) -> None:
    cfg = load_config("workstation", overrides={
        "perception": {"backend": "geometric"}, "cache": {"enabled": False},
        "reasoning": {"model": {"device": "cpu", "dtype": "float32", "max_new_tokens": 24}}})
    pipeline = load_pipeline(cfg)
    lm = Recorded(pipeline.lm)
    pipeline.lm = lm
    answer = pipeline.ask(frames, validate_query("Which way did I turn?", OPTIONS))
    pipeline.close()
    assert answer.success and answer.raw
    assert lm.seen[0][0] == {"role": "system", "content": RELEASED_SYSTEM}
    assert answer.answer == official_eval_letter(answer.raw)  # the official extraction


def test_the_paper_profile_reasons_over_embodied_r_serve(
    released_hub: Path, frames: list[tuple], tmp_path: Path, tiny_models_dir: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """``embodied-r serve --role lm`` serves the reasoner on loopback in the place of vLLM; the
    ``paper`` profile's reply through it is the one the model gives in-process, read the
    official way, and the served model bears the repository's name."""
    layer = tmp_path / "served.yaml"
    layer.write_text("base: server\nreasoning:\n  model: {device: cpu, dtype: float32}\n")
    port = free_port()
    env = {**os.environ, "HF_HUB_CACHE": str(released_hub), "HF_HUB_OFFLINE": "1",
           "EMBODIED_R_MODEL_CACHE": str(tiny_models_dir), "EMBODIED_R_LM_API_KEY": "lm-key"}
    code = ("import sys; from embodied_r_ros.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", code, "-v", "serve", "--config", str(layer),
                             "--role", "lm", "--port", str(port), "--api-key-env",
                             "EMBODIED_R_LM_API_KEY"], env=env, stderr=subprocess.PIPE)
    monkeypatch.setenv("EMBODIED_R_LM_API_KEY", "lm-key")
    url = f"http://127.0.0.1:{port}/v1"
    try:
        cfg = load_config("paper", overrides={
            "perception": {"backend": "geometric"}, "cache": {"enabled": False},
            "reasoning": {"model": {"base_url": url, "max_new_tokens": 24}}})
        pipeline = load_pipeline(cfg)
        deadline = time.monotonic() + 120
        while not pipeline.lm.healthy():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.3)
        answer = pipeline.ask(frames, validate_query("Which way did I turn?", OPTIONS))
        conversation = pipeline.reasoning_messages(answer.perception)
        pipeline.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr.decode()
    assert f"serving {RELEASED_REPO} at {url}" in stderr.decode()
    assert answer.success and conversation[0]["content"] == RELEASED_SYSTEM
    direct = create_backend(released(), text_only=True).complete([conversation])[0].text
    assert answer.raw == direct
    assert answer.answer == official_eval_letter(direct)


def test_its_greedy_tokens_agree_on_transformers_and_on_its_gguf_export(
    released_hub: Path, tiny_models_dir: Path
) -> None:
    """The decoder exported by ``embodied-r-train export --gguf`` runs on llama.cpp to the
    same 32 greedy tokens as transformers, from the same prompt tokens."""
    pytest.importorskip("llama_cpp")
    assert train_main(["export", RELEASED_REPO, "--subfolder", "Weight_1", "--name",
                       "released-w1-f32", "--gguf", "float32", "--force"]) == 0
    conversation = [{"role": "system", "content": RELEASED_SYSTEM},
                    {"role": "user", "content": "Question: Which way did I turn?\nChoices:\n"
                     "A. rotate left\nB. rotate right"}]
    hf = create_backend(released(), text_only=True)
    gguf = create_backend(ModelConfig(backend="llamacpp", model="released-w1-f32",
                                      quantization="float32", threads_per_reply=2),
                          cache_dir=tiny_models_dir, text_only=True)
    try:
        ids = gguf.prompt_ids(conversation)
        assert ids == hf.encode([conversation])["input_ids"][0].tolist()
        want = greedy_tokens(hf.model, ids, 32)
        got = []
        for token in gguf.llm.generate(ids, temp=0.0, top_k=1, repeat_penalty=1.0, min_p=0.0):
            got.append(int(token))
            if len(got) == 32:
                break
    finally:
        gguf.close()
    assert got == want, (got, want)
