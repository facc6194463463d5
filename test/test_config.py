from __future__ import annotations

from pathlib import Path

import pytest

from embodied_r_ros.core.config import CONFIG_DIR, ConfigError, KeyframeConfig
from embodied_r_ros.core.profiles import (
    api_key_from_env,
    available_profiles,
    config_from_dict,
    load_config,
)


@pytest.mark.parametrize("profile", ["tiny", "offline", "workstation", "server", "paper",
                                     "jetson"])
def test_shipped_profiles_validate(profile: str) -> None:
    cfg = load_config(profile)
    assert cfg.name == profile
    assert cfg.keyframes == KeyframeConfig()  # paper defaults unless a profile says otherwise


def test_keyframe_defaults_match_the_paper() -> None:
    kf = KeyframeConfig()
    assert (kf.sample_fps, kf.overlap_threshold, kf.min_frames, kf.max_frames) == (1.0, 0.5, 4, 32)
    assert (kf.n_features, kf.min_matches, kf.ransac_reproj_px) == (500, 10, 5.0)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"perception": {"bogus": 1}}, "perception.bogus"),
        ({"reasoning": {"model": {"dtype": "fp8"}}}, "reasoning.model.dtype"),
        ({"keyframes": {"sample_fps": -1}}, "keyframes.sample_fps"),
        ({"keyframes": {"overlap_threshold": 1.5}}, "keyframes.overlap_threshold"),
        ({"reasoning": {"model": {"max_new_tokens": 0}}}, "reasoning.model.max_new_tokens"),
        ({"unknown_top": True}, "unknown_top"),
        # non-finite numbers, non-HTTP endpoints, non-variable key names
        ({"keyframes": {"sample_fps": float("inf")}}, "keyframes.sample_fps"),
        ({"keyframes": {"ransac_reproj_px": float("nan")}}, "keyframes.ransac_reproj_px"),
        ({"perception": {"camera": {"fx": float("inf")}}}, "perception.camera.fx"),
        ({"perception": {"vlm": {"base_url": "not a url"}}}, "perception.vlm.base_url"),
        ({"perception": {"vlm": {"base_url": "ftp://host/v1"}}}, "perception.vlm.base_url"),
        ({"perception": {"vlm": {"base_url": "file:///etc/passwd"}}}, "perception.vlm.base_url"),
        ({"perception": {"vlm": {"base_url": "http://host:99999/v1"}}},
         "perception.vlm.base_url"),
        ({"perception": {"vlm": {"api_key_env": "MY KEY"}}}, "perception.vlm.api_key_env"),
        ({"reasoning": {"model": {"subfolder": "../elsewhere"}}}, "reasoning.model.subfolder"),
        ({"reasoning": {"model": {"subfolder": "/abs"}}}, "reasoning.model.subfolder"),
        ({"reasoning": {"model": {"n_gpu_layers": -2}}}, "reasoning.model.n_gpu_layers"),
        ({"reasoning": {"model": {"context_tokens": 10}}}, "reasoning.model.context_tokens"),
    ],
)
def test_bad_keys_and_values_name_the_key(overrides: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=f"'{key}'") as err:
        load_config("server", overrides=overrides)
    assert "\n" not in str(err.value)


def test_http_urls_validate() -> None:
    for url in ("http://127.0.0.1:8000/v1", "https://api.example.com/v1", "http://[::1]:80/v1"):
        cfg = load_config("server", overrides={"perception": {"vlm": {"base_url": url}}})
        assert cfg.perception.vlm is not None and cfg.perception.vlm.base_url == url


def test_api_keys_are_stripped_or_refused_without_showing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ER_TEST_KEY", "sk-secret-123\r\n")
    assert api_key_from_env("ER_TEST_KEY") == "sk-secret-123"  # a Windows line ending
    monkeypatch.setenv("ER_TEST_KEY", "sk-sec\nret-123")
    with pytest.raises(ConfigError) as err:
        api_key_from_env("ER_TEST_KEY")
    assert "ER_TEST_KEY" in str(err.value) and "sec" not in str(err.value)
    monkeypatch.setenv("ER_TEST_KEY", "  ")
    with pytest.raises(ConfigError, match="ER_TEST_KEY .* is not set"):
        api_key_from_env("ER_TEST_KEY")


def test_relative_base_and_prompts_resolve_against_the_naming_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "robots").mkdir()
    (tmp_path / "robots" / "common.yaml").write_text("base: offline\nkeyframes:\n  max_frames: 8\n")
    prompts = (CONFIG_DIR / "prompts.yaml").read_text().replace("Be concise.", "Be brief.")
    (tmp_path / "robots" / "my_prompts.yaml").write_text(prompts)
    robot = tmp_path / "robots" / "robot.yaml"
    robot.write_text("base: common.yaml\nname: robot\nprompts: my_prompts.yaml\n")
    monkeypatch.chdir(tmp_path)  # not the folder of the files
    cfg = load_config(path="robots/robot.yaml")
    assert cfg.keyframes.max_frames == 8 and cfg.name == "robot"
    assert cfg.prompts == str(tmp_path / "robots" / "my_prompts.yaml")


def test_profile_names_never_leave_the_profiles_folder(tmp_path: Path) -> None:
    assert set(available_profiles()) == {"tiny", "offline", "workstation", "server", "paper",
                                         "jetson"}
    for name in ("ros_params", "../ros_params", "..", "prompts"):
        with pytest.raises(ConfigError, match="unknown profile|must be a .yaml"):
            load_config(name)
    with pytest.raises(ConfigError, match="must be a .yaml"):
        load_config(path=str(tmp_path / "x.txt"))


def test_openai_backend_requires_base_url() -> None:
    with pytest.raises(ConfigError, match="base_url"):
        load_config(
            "server", overrides={"perception": {"vlm": {"base_url": None}}}
        )


def test_vlm_perception_requires_a_vlm() -> None:
    with pytest.raises(ConfigError, match="perception.vlm is required"):
        config_from_dict(
            {"perception": {"backend": "vlm"}, "reasoning": {"model": {"model": "x"}}}
        )


def test_user_file_extends_a_profile(tmp_path: Path) -> None:
    f = tmp_path / "robot.yaml"
    f.write_text("base: offline\nname: robot\nkeyframes:\n  max_frames: 16\n")
    cfg = load_config(path=f)
    assert cfg.name == "robot" and cfg.keyframes.max_frames == 16
    assert cfg.reasoning.model.model == "smollm2-135m-embodied-r"
    assert cfg.reasoning.memory_model == "smollm2-135m-embodied-r-memory"


@pytest.mark.parametrize(("layer", "memory_model"), [
    ("reasoning: {model: {max_new_tokens: 8}}", "smollm2-135m-embodied-r-memory"),
    ("reasoning: {model: {model: smollm2-135m-embodied-r}}", "smollm2-135m-embodied-r-memory"),
    ("reasoning: {model: {model: tiny-qwen2}}", None),
    ("reasoning: {model: {model: tiny-qwen2}, memory_model: my-reader}", "my-reader"),
    ("reasoning: {memory_model: null}", None),
])
def test_the_memory_reader_goes_with_the_reasoning_model_it_was_trained_beside(
        tmp_path: Path, layer: str, memory_model: str | None) -> None:
    """A layer that names another reasoning model drops the base's memory reader (the new
    model reads memory texts too) unless it names one; other changes keep it."""
    f = tmp_path / "robot.yaml"
    f.write_text(f"base: offline\nmemory: {{enabled: true}}\n{layer}\n")
    config = load_config(path=f)
    reasoning = config.reasoning
    assert reasoning.memory_model == memory_model
    reader = config.memory_reader()
    assert (reader is None) == (memory_model is None)
    if reader is not None:
        assert reader.model == memory_model
        assert reader.model_dump(exclude={"model"}) == reasoning.model.model_dump(
            exclude={"model"})
    overridden = load_config("offline", overrides={"reasoning": {"model": {"model": "x"}}})
    assert overridden.reasoning.memory_model is None
    off = load_config(path=f, overrides={"memory": {"enabled": False}})
    assert off.reasoning.memory_model == memory_model and off.memory_reader() is None


def test_unknown_profile_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown profile 'nope'"):
        load_config("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path=bad)
    cyc = tmp_path / "cyc.yaml"
    cyc.write_text(f"base: {cyc}\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(path=cyc)
    assert {"tiny", "offline", "workstation", "server"} <= set(available_profiles())


@pytest.mark.parametrize("profile", ["workstation", "server", "paper", "jetson"])
def test_the_paper_profiles_run_the_released_reasoner_as_the_official_code(profile: str) -> None:
    """The released checkpoint (Weight_1 unless a config names the other run), the official
    batch inference's system prompt, greedy decoding with 3096 new tokens, the official answer
    extraction."""
    from embodied_r_ros.backends.checkpoints import RELEASED_REPO, default_subfolder
    from embodied_r_ros.core.prompts import prompts_from

    cfg = load_config(profile)
    model = cfg.reasoning.model
    assert model.model == RELEASED_REPO and default_subfolder(model.model, model.subfolder) == (
        "Weight_1")
    assert (model.temperature, model.max_new_tokens) == (0.0, 3096)
    assert cfg.reasoning.answer_mode == "official"
    assert prompts_from(cfg.prompts).system.endswith("User: . Assistant:")
    other = load_config(profile, overrides={"reasoning": {"model": {"subfolder": "Weight_2"}}})
    assert other.reasoning.model.subfolder == "Weight_2"
    baseline = load_config(profile, overrides={
        "reasoning": {"model": {"model": "Qwen/Qwen2.5-3B-Instruct"}}})
    assert default_subfolder(baseline.reasoning.model.model,
                             baseline.reasoning.model.subfolder) == ""  # its root


def test_the_interactive_decoding_is_one_config_layer(tmp_path: Path) -> None:
    """The official interactive demo's reasoning settings (temperature 0.7, 4096 tokens)."""
    layer = tmp_path / "interactive.yaml"
    layer.write_text("base: workstation\nreasoning:\n  model: {temperature: 0.7, "
                     "max_new_tokens: 4096}\n")
    model = load_config(path=str(layer)).reasoning.model
    assert (model.temperature, model.max_new_tokens, model.model) == (
        0.7, 4096, "EmbodiedCity/Embodied-R")
