from __future__ import annotations

from pathlib import Path

import pytest

from embodied_r_ros.core.config import (
    ConfigError,
    KeyframeConfig,
    available_profiles,
    config_from_dict,
    load_config,
)


@pytest.mark.parametrize("profile", ["tiny", "offline", "workstation", "server"])
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
    ],
)
def test_bad_keys_and_values_name_the_key(overrides: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=f"'{key}'"):
        load_config("tiny", overrides=overrides)


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
    assert cfg.reasoning.model.model == "smollm2-135m"


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
