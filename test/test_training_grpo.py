"""GRPO with the tiny model: parameters move, stages switch at epochs, a stopped run resumes;
the SFT baseline; evaluation tables."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from test_rewards import RuleReference
from torch import Tensor
from transformers import AutoModelForCausalLM, TrainerCallback

from embodied_r_ros.core.chat import ChatBackend, Completion
from embodied_r_ros.core.perception_text import observation
from embodied_r_training.cli import main
from embodied_r_training.data.prompt_budget import dataset_layout, fit_prompt, token_counter
from embodied_r_training.data.row_records import record_of
from embodied_r_training.evaluation.report import markdown_report, paper_columns
from embodied_r_training.evaluation.scoring import EvalResult, average_folds, score
from embodied_r_training.recipe import PAPER_STAGES, load_train_config
from embodied_r_training.rewards import ConsistencyReward, completion_text
from embodied_r_training.rl.grpo import NamedReward, grpo_args, run_grpo
from embodied_r_training.rl.policy import local_model
from embodied_r_training.rl.schedule import epoch_index, stage_at
from embodied_r_training.train_demo import KeepCheckpoint, consistency_start_epoch


def test_schedule_follows_epochs() -> None:
    assert [epoch_index(e) for e in (None, 0.0, 0.5, 0.999999, 1.0, 2.0, 2.25)] == [
        0, 0, 0, 0, 1, 2, 2]
    stages = list(PAPER_STAGES)
    assert [stage_at(stages, e) for e in range(13)] == [0, 0, 1, 1] + [2] * 9
    # the weights in the order of the rewards: format, accuracy, consistency
    assert [stages[stage_at(stages, e)].weights() for e in (0, 3, 11)] == [
        [0.7, 0.3, 0.0], [0.3, 0.7, 0.0], [0.1, 0.7, 0.2]]


def test_config_validation_names_the_key() -> None:
    from embodied_r_ros.core.config import ConfigError

    with pytest.raises(ConfigError, match="grpo.bogus.*unknown key"):
        load_train_config("cpu-tiny", {"grpo": {"bogus": 1}})
    with pytest.raises(ConfigError, match="multiple of num_generations"):
        load_train_config("paper", {"grpo": {"completions_per_step": 12}})
    paper = load_train_config("paper")
    assert (paper.grpo.num_generations, paper.grpo.learning_rate, paper.grpo.beta) == (
        8, 5e-7, 0.001)
    assert paper.grpo.loss_type == "grpo" and paper.grpo.gradient_accumulation(1) == 4
    assert paper.policy.model == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert paper.rewards.reference is not None
    assert paper.rewards.reference.model == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert (paper.grpo.top_k, paper.grpo.top_p, paper.grpo.lr_scheduler) == (50, 0.9, "cosine")
    assert (paper.grpo.warmup_ratio, paper.grpo.eval_steps, paper.output.save_steps) == (
        0.05, 100, 100)
    # the maintainers' three resumed trainings keep the optimizer; ms-swift GRPO truncates left
    assert not paper.output.save_only_model and paper.data.over_length == "left"
    assert paper.rewards.stage_mode == "resumed_runs"
    assert paper.rewards.answer_mode == "official"
    official = load_train_config("official")
    assert [s.weights() for s in official.rewards.stages] == [[0.1, 0.7, 0.2]]
    assert official.grpo.num_epochs == 2 and official.grpo.num_generations == 8
    five = load_train_config("official-5gpu")
    assert five.grpo.num_generations == 4 and five.rewards.fallback == "think_regex"
    assert five.grpo.gradient_accumulation(4) == 1  # 16 completions = 4 per GPU x 4 GPUs
    args = grpo_args(paper, Path("/tmp/unused"), "cpu", validate=True)
    assert (args.top_k, args.top_p, args.lr_scheduler_type) == (50, 0.9, "cosine")
    assert args.eval_strategy == "steps" and args.eval_steps == 100
    assert not args.save_only_model and args.reward_weights == [1.0, 1.0, 1.0]


def _dense(completions: list[Any], **_: Any) -> list[float]:
    """A reward random models can earn: the reply's length (so groups differ)."""
    return [len(completion_text(c)) / 10.0 for c in completions]


def _const(value: float) -> Any:
    return lambda completions, **_: [value] * len(completions)


class _StopAfter(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
        if state.global_step >= self.step:
            control.should_training_stop = True
        return control


def test_grpo_trains_switches_stages_and_resumes(dataset: Path, tmp_path: Path,
                                                 tiny_models_dir: Path) -> None:
    cfg = load_train_config("cpu-tiny", {"data": {"max_rows": 2}, "grpo": {"max_steps": 3}})
    out = tmp_path / "run"
    # 1) the paper's rewards (the reference LM is built), stopped after one step = one epoch
    first = run_grpo(cfg, dataset, output_dir=out, callbacks=[_StopAfter(1)])
    assert first.global_step == 1 and first.resumed_from is None
    assert (out / "checkpoint-1" / "optimizer.pt").is_file()  # optimizer state is saved
    # 2) resumed with a dense reward so the random model gets gradients
    funcs = [NamedReward("format", _dense), NamedReward("accuracy", _const(1.0)),
             NamedReward("consistency", _const(0.5))]
    keep = KeepCheckpoint(consistency_start_epoch(cfg.rewards.stages), tmp_path / "kept")
    second = run_grpo(cfg, dataset, output_dir=out, reward_funcs=funcs, callbacks=[keep])
    assert second.resumed_from is not None and second.resumed_from.endswith("checkpoint-1")
    assert second.global_step == 3
    # the ablation's branch point: the checkpoint where the consistency stage (epoch 2) begins,
    # kept aside with its optimizer state although save_total_limit rotates it away in `out`
    kept = json.loads((tmp_path / "kept" / "checkpoint-2" / "trainer_state.json").read_text())
    assert kept["global_step"] == 2 and kept["epoch"] == pytest.approx(2.0)
    assert (tmp_path / "kept" / "checkpoint-2" / "optimizer.pt").is_file()
    history = json.loads((out / "log_history.json").read_text())
    steps = [h for h in history if "reward_stage" in h]
    assert [h["step"] for h in steps] == [1, 2, 3]
    # one prompt pair per step = one epoch per step: the stage changes at every boundary
    assert [h["reward_stage"] for h in steps] == [1, 2, 3]
    assert [h["reward_weights/format"] for h in steps] == pytest.approx([0.7, 0.3, 0.1])
    assert [h["reward_weights/consistency"] for h in steps] == pytest.approx([0.0, 0.0, 0.2])
    assert [h["consistency_rate"] for h in steps[1:]] == pytest.approx([0.5, 0.5])
    assert all("completions/mean_length" in h for h in steps)
    assert steps[-1]["zero_variance_groups"] == 0  # the dense reward's groups all differ
    # the parameters moved away from the initial random weights
    before = AutoModelForCausalLM.from_pretrained(local_model("tiny-qwen2")).state_dict()
    after = AutoModelForCausalLM.from_pretrained(second.final_model).state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) > len(before) // 2
    assert (out / "curves.png").stat().st_size > 1000
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))


def test_groups_of_equal_rewards_are_skipped_counted_and_move_nothing(
        dataset: Path, tmp_path: Path, tiny_models_dir: Path) -> None:
    """With beta 0 a group whose rewards are all equal has advantage 0 and no gradient: its
    forward and backward pass are skipped, it is counted, and the weights stay as they were."""
    cfg = load_train_config("cpu-tiny", {"data": {"max_rows": 2}, "grpo": {
        "max_steps": 2, "beta": 0.0, "weight_decay": 0.0}})
    flat = [NamedReward("format", _const(1.0)), NamedReward("accuracy", _const(0.0)),
            NamedReward("consistency", _const(0.0))]
    result = run_grpo(cfg, dataset, output_dir=tmp_path / "flat", reward_funcs=flat)
    logs = [h for h in json.loads((tmp_path / "flat" / "log_history.json").read_text())
            if "groups_seen" in h]
    # 2 steps x 4 completions a step / 2 a group = 4 groups, every one of them flat
    assert [(h["zero_variance_groups"], h["groups_seen"]) for h in logs] == [(2, 2), (4, 4)]
    before = AutoModelForCausalLM.from_pretrained(local_model("tiny-qwen2")).state_dict()
    after = AutoModelForCausalLM.from_pretrained(result.final_model).state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def _token_nll(model: Any, tokenizer: Any, target: dict[str, Any]) -> tuple[Tensor, int]:
    """Per-token negative log-likelihoods of a prompt-completion row, and the prompt's length
    in tokens (the chat template with and without the completion)."""
    def ids(messages: list[dict[str, Any]], prompt: bool) -> list[int]:
        text = tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=prompt)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    prompt = ids(target["prompt"], True)
    full = torch.tensor([ids(target["prompt"] + target["completion"], False)])
    with torch.no_grad():
        logits = model(full).logits[0, :-1]
    nll = torch.nn.functional.cross_entropy(logits, full[0, 1:], reduction="none")
    return nll, len(prompt) - 1  # nll[i] scores token i + 1


def test_sft_baseline_loss_is_the_completion_only_and_moves(dataset: Path, tmp_path: Path,
                                                            tiny_models_dir: Path) -> None:
    from transformers import AutoTokenizer

    from embodied_r_training.data.dataset_files import load_rows
    from embodied_r_training.rl.sft import run_sft, sft_rows, target_text

    row = {"options": ["A. left", "B. right"], "solution": "B"}
    assert target_text(row, "t") == "<think>t</think>\n<answer>B. right</answer>"
    steps = 3
    cfg = load_train_config("cpu-tiny", {"data": {"max_rows": 2},
                                         "sft": {"max_steps": steps, "learning_rate": 3e-3},
                                         "output": {"tensorboard": False}})
    result = run_sft(cfg, dataset, output_dir=tmp_path / "sft")
    assert result.global_step == steps and (result.final_model / "config.json").is_file()
    history = json.loads((tmp_path / "sft" / "log_history.json").read_text())
    losses = [h["loss"] for h in history if "loss" in h]
    # moving: the same two rows every step (batch 2), the loss falls every step
    assert len(losses) == steps and all(b < a for a, b in zip(losses, losses[1:], strict=False))
    assert losses[-1] < losses[0] - 0.3, losses
    # masked: the last step's loss is the mean over completion tokens only, under the weights
    # it was computed with (the checkpoint one step earlier), not over the prompt's too
    before = AutoModelForCausalLM.from_pretrained(tmp_path / "sft" / f"checkpoint-{steps - 1}")
    tokenizer = AutoTokenizer.from_pretrained(local_model("tiny-qwen2"))
    rows = load_rows(dataset, cfg.data.split, cfg.data.fold)[:2]
    nlls = [_token_nll(before.eval(), tokenizer, t) for t in sft_rows(rows, cfg.sft)]
    completion = torch.cat([nll[n:] for nll, n in nlls]).mean().item()
    everything = torch.cat([nll for nll, _ in nlls]).mean().item()
    assert everything - completion > 0.3  # the two readings are far apart here
    assert losses[-1] == pytest.approx(completion, abs=0.02), (losses[-1], everything)


def test_prompts_drop_the_oldest_frames_first(dataset: Path, tiny_models_dir: Path) -> None:
    from transformers import AutoTokenizer

    from embodied_r_training.data.dataset_files import load_rows

    row = load_rows(dataset)[0]
    count = token_counter(AutoTokenizer.from_pretrained(local_model("tiny-qwen2")))
    full = count(row["prompt"])
    layout = dataset_layout(dataset)
    same, dropped = fit_prompt(row, count, full, layout)
    assert dropped == 0 and same == row["prompt"]
    shorter, dropped = fit_prompt(row, count, full - 1, layout)
    text = shorter[1]["content"]
    assert dropped >= 1 and count(shorter) <= full - 1
    assert text.endswith(row["question_block"])  # the question block is intact
    frames = record_of(row).frames
    last, first = observation(frames[-1]), observation(frames[0])
    assert last in text and (first not in text or first == last)


def test_score_and_tables() -> None:
    opts = ["A. left", "B. right"]
    rows = [
        {"id": "1", "category": "relative_direction", "solution": "B", "options": opts,
         "prompt": "Question: q?", "question_block": "Question: q?\nChoices:\nA. left\nB. right"},
        {"id": "2", "category": "relative_direction", "solution": "A", "options": opts,
         "prompt": "Question: q?", "question_block": "Question: q?"},
        {"id": "3", "category": "Landmark Position", "solution": "A", "options": opts,
         "prompt": "Question: q?", "question_block": "Question: q?"},
    ]
    completions = [
        "<think>it turned right, B</think><answer>B</answer>",  # right, consistent
        "<think>surely B</think><answer>A</answer>",  # right, inconsistent
        "A maybe",  # wrong format but the letter is right
    ]
    metrics, preds = score(rows, completions, judge=ConsistencyReward(RuleReference()))
    assert metrics["accuracy"] == pytest.approx(1.0) and metrics["n"] == 3
    # "A maybe": the tag reading finds A; the official extractor has no <answer> or dotted letter
    assert metrics["accuracy_by_mode"] == {"official": pytest.approx(2 / 3), "tag": 1.0}
    assert [p["answer_official"] for p in preds] == ["B", "A", "A MAYBE"]
    official, _ = score(rows, completions, answer_mode="official")
    assert official["accuracy"] == pytest.approx(2 / 3) and official["answer_mode"] == "official"
    assert metrics["format_rate"] == pytest.approx(2 / 3)
    assert metrics["consistency_rate"] == pytest.approx(1 / 3)  # 1 of 3 correct answers
    assert metrics["per_category"]["relative_direction"] == {
        "n": 2, "accuracy": 1.0, "accuracy_official": 1.0, "accuracy_tag": 1.0,
        "ci_low": 1.0, "ci_high": 1.0}  # every resample of two hits is all hits
    assert metrics["accuracy_ci"] == (1.0, 1.0)
    assert metrics["per_category"]["Landmark Position"]["accuracy_official"] == 0.0
    assert [p["consistent"] for p in preds] == [True, False, False]
    result = EvalResult(model="m", split="test", **metrics)
    assert paper_columns(result.per_category) == {"LP": 100.0, "RDir": 100.0}
    table = markdown_report({"this run": result})
    assert "| relative_direction | 2 | 100.0 | 100.0 |" in table
    assert "| Landmark Position | 1 | 0.0 | 100.0 |" in table
    assert "| **overall (micro)** | 3 | **66.7** | **100.0** |" in table
    assert "| Embodied-R (VLM-72B + LLM-3B) [paper] | 51.1 |" in table
    assert "| OpenAI-o1 [paper] | 37.2 |" in table and "Gemini-2.5-Pro" in table
    other = EvalResult(model="m", split="test", n=1, accuracy=0.0, format_rate=0.0,
                       consistency_rate=None,
                       per_category={"relative_direction": {"n": 1, "accuracy": 0.0}})
    mean = average_folds([result, other])
    assert mean.accuracy == pytest.approx(0.5) and mean.n == 4
    assert mean.accuracy_by_mode == {}  # the second result has no per-mode figures
    assert mean.per_category["relative_direction"]["accuracy_official"] == pytest.approx(1.0)
    assert mean.per_category["relative_direction"]["accuracy"] == pytest.approx(0.5)
    assert mean.per_category["Landmark Position"]["accuracy"] == pytest.approx(1.0)
    assert mean.consistency_rate == pytest.approx(1 / 3) and len(mean.folds) == 2


def test_eval_command_writes_json_markdown_and_png(dataset: Path, tmp_path: Path,
                                                   tiny_models_dir: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "eval"
    assert main(["eval", "--config", "cpu-tiny", "--model", "base=tiny-qwen2", "--data",
                 str(dataset), "--split", "all", "--out", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    base = data["base"]
    preds = [json.loads(x) for x in (out / "predictions-base.jsonl").read_text().splitlines()]
    assert base["n"] == len(preds) == 8
    # the figures are the saved predictions' (the scoring itself: the scripted test below)
    assert [p["correct"] for p in preds] == [p["answer"] == p["solution"] for p in preds]
    assert base["accuracy"] == pytest.approx(sum(p["correct"] for p in preds) / 8)
    assert base["format_rate"] == pytest.approx(sum(p["well_formed"] for p in preds) / 8)
    assert set(base["per_category"]) == {"rotation", "motion"}
    correct = sum(p["correct"] for p in preds)
    consistent = sum(bool(p["consistent"]) for p in preds)
    assert base["consistency_rate"] == pytest.approx(consistent / correct if correct else 0.0)
    assert "| Method | Avg. |" in (out / "eval.md").read_text()
    assert (out / "eval.png").stat().st_size > 1000


def test_evaluate_scores_known_replies_to_hand_computed_figures(dataset: Path) -> None:
    """A scripted policy whose replies are known: every figure below is counted by hand."""
    from scripted import ScriptedVLM

    from embodied_r_training.data.dataset_files import load_rows
    from embodied_r_training.evaluation.evaluate import evaluate

    rows = load_rows(dataset, "all", None)
    texts = {"A": "left", "B": "right", "C": "up", "D": "down"}

    def other(letter: str) -> str:
        return "ABCD"[("ABCD".index(letter) + 1) % 4]

    # (reply, right by the tag reading, right by the official extractor, well formed,
    #  consistent: the rule reference answers the last letter named in the thinking)
    kinds = [
        (lambda s: f"<think>so {s}</think><answer>{s}</answer>", 1, 1, 1, 1),
        (lambda s: f"<think>x</think><answer>{other(s)}</answer>", 0, 0, 1, 0),
        (lambda s: f"I think {s}", 1, 0, 0, 0),  # no tag: official reads no letter
        (lambda s: f"<think>surely {other(s)}</think><answer>{s}. {texts[s]}</answer>",
         1, 1, 1, 0),
        (lambda s: "no idea", 0, 0, 0, 0),
        (lambda s: f"<think>it is {s}</think><answer>{s}</answer>", 1, 1, 1, 1),
        (lambda s: f"<think>{s}?</think><answer>{other(s)}</answer>", 0, 0, 1, 0),
        (lambda s: f"<think>hmm</think><answer>{s}</answer>", 1, 1, 1, 0),
    ]
    assert len(rows) == len(kinds) == 8
    replies = [make(r["solution"]) for (make, *_), r in zip(kinds, rows, strict=True)]
    cfg = load_train_config("cpu-tiny")
    result, preds = evaluate("scripted", dataset, cfg, split="all", answer_mode="tag",
                             backend=ScriptedVLM(replies), reference=RuleReference())
    assert [p["completion"] for p in preds] == replies
    assert result.n == 8 and result.accuracy == 5 / 8
    assert result.accuracy_by_mode == {"tag": 5 / 8, "official": 4 / 8}
    assert result.format_rate == 6 / 8
    assert result.consistency_rate == 2 / 5  # 2 consistent of the 5 right
    assert [p["correct"] for p in preds] == [bool(k[1]) for k in kinds]
    assert [p["consistent"] for p in preds] == [bool(k[4]) for k in kinds]
    for category in ("rotation", "motion"):
        idx = [i for i, r in enumerate(rows) if r["category"] == category]
        got = result.per_category[category]
        assert got["n"] == len(idx) == 4
        assert got["accuracy_tag"] == sum(kinds[i][1] for i in idx) / 4
        assert got["accuracy_official"] == sum(kinds[i][2] for i in idx) / 4
    table = markdown_report({"scripted": result})
    assert "| **overall (micro)** | 8 | **50.0** | **62.5** |" in table


class _OptionTextReference(ChatBackend):
    """A reference LM that answers the letter of the last option text named in the thinking."""

    model_id = "option-text-reference"

    def __init__(self, options: dict[str, str]) -> None:
        self.letter_of = {text: letter for letter, text in options.items()}

    def complete(self, conversations, **_: object) -> list[Completion]:  # noqa: ANN001
        replies = []
        for conv in conversations:
            words = conv[-1]["content"].split("Thinking process:")[1].split()
            named = [self.letter_of[w] for w in words if w in self.letter_of]
            replies.append(Completion(named[-1] if named else "none"))
        return replies


def test_the_consistency_rate_reads_answers_as_the_headline_does(dataset: Path) -> None:
    """A model that answers with the option's text, scored by the tag reading under a config
    whose rewards read officially: the judge must read the tag too. It read officially, found
    none of these answers correct, never asked the reference and reported a consistency rate
    of 0 (as it did for the old shipped reasoner, which answers with the option's text)."""
    from scripted import ScriptedVLM

    from embodied_r_ros.core.reasoning import parse_options
    from embodied_r_training.data.dataset_files import load_rows
    from embodied_r_training.evaluation.evaluate import evaluate

    rows = load_rows(dataset, "all", None)
    options = dict(parse_options(rows[0]["options"]))
    assert all(dict(parse_options(r["options"])) == options for r in rows)
    replies = [f"<think>it went {options[r['solution']]}</think>"
               f"<answer>{options[r['solution']]}</answer>" for r in rows]
    cfg = load_train_config("cpu-tiny", {"rewards": {"answer_mode": "official"}})
    result, _ = evaluate("scripted", dataset, cfg, split="all", answer_mode="tag",
                         backend=ScriptedVLM(replies), reference=_OptionTextReference(options))
    assert result.accuracy_by_mode["tag"] == 1.0
    assert result.consistency_rate == 1.0


def test_gpu_bench_runs_in_tiny_cpu_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "grpo_gpu.py"
    monkeypatch.syspath_prepend(str(path.parent))  # as the script runs: its folder on the path
    spec = importlib.util.spec_from_file_location("grpo_gpu_bench", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    assert bench.main(["--tiny", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["mode"] == "tiny-cpu" and result["steps"] == 2
    assert result["steps_per_minute"] > 0 and result["completions_per_step"] == 4
    assert result["parameters"] > 0 and len(result["step_seconds"]) == 2
    assert result["bound_met"] is True and result["min_steps_per_minute"] == 0.0
    # a missed bound is exit 1, the figures still written
    assert bench.main(["--tiny", "--steps", "1", "--min-steps-per-minute", "1e9",
                       "--json", str(out)]) == 1
    missed = json.loads(out.read_text())
    assert missed["bound_met"] is False and missed["steps"] == 1


@pytest.mark.parametrize("command", ["grpo", "sft"])
def test_a_run_from_an_adapter_never_written_stops_with_one_line(
        command: str, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "sft" / "final-adapter"
    code = main([command, "--config", "cpu-tiny", "--data", str(dataset), "--out",
                 str(tmp_path / "run"), "--set", f"policy.adapter={missing}"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "policy.adapter" in err and str(missing) in err and "does not exist" in err
    assert not (tmp_path / "run").exists()


def test_a_dataset_of_an_older_text_layout_is_refused_with_one_line(
        dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old"
    shutil.copytree(dataset, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["frame_layout"]  # written before the layout was recorded
    (old / "manifest.json").write_text(json.dumps(manifest))
    for command in (["eval", "--model", "oracle"], ["grpo", "--out", str(tmp_path / "run")]):
        code = main([*command, "--config", "cpu-tiny", "--data", str(old)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and "\n" not in err and "Traceback" not in err
        assert "older layout" in err and "rebuild the dataset" in err
    assert dataset_layout(dataset).frame_layout in ("timed", "paper")
