"""The final save of a multi-process run writes the full weights (LoRA merged, the adapter kept).

Two CPU processes (torchrun: the same torch.distributed set-up accelerate uses inside the
trainer; ``accelerate launch --cpu`` starts one process unless MPI is installed). DeepSpeed
ZeRO-3 itself is not among the test dependencies: the save goes through ``Trainer.save_model``,
the path that gathers ZeRO-3 shards, but that gathering needs GPUs and is not tested here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from embodied_r_training.rl.policy import local_model


def torchrun(*args: str, cwd: Path) -> str:
    runner = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert runner is not None
    proc = subprocess.run(
        [runner, "--nproc_per_node", "2", "-m", "embodied_r_training.cli", *args],
        cwd=cwd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout


def test_two_process_full_fine_tuning_saves_every_weight(dataset: Path, tmp_path: Path,
                                                         tiny_models_dir: Path) -> None:
    out = tmp_path / "run"
    stdout = torchrun("sft", "--config", "cpu-tiny", "--data", str(dataset), "--out", str(out),
                      "--set", "data.max_rows=4", cwd=tmp_path)
    assert stdout.count("trained 2 steps") == 2  # both ranks trained
    final = load_file(out / "final" / "model.safetensors")
    last = load_file(out / "checkpoint-2" / "model.safetensors")
    initial = load_file(Path(local_model("tiny-qwen2")) / "model.safetensors")
    assert set(final) == set(initial) == set(last)
    assert all(torch.equal(final[k], last[k]) for k in final)  # the trained weights, whole
    assert sum(not torch.equal(final[k], initial[k]) for k in final) > len(final) // 2


def test_two_process_lora_keeps_the_adapter_and_merges_it(dataset: Path, tmp_path: Path,
                                                          tiny_models_dir: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "lora"
    torchrun("sft", "--config", "cpu-tiny", "--data", str(dataset), "--out", str(out),
             "--set", "data.max_rows=4", "--set", "policy.lora={r: 4, alpha: 8}", cwd=tmp_path)
    adapter = out / "final-adapter"
    assert (adapter / "adapter_model.safetensors").stat().st_size < 2 * 2**20
    base = AutoModelForCausalLM.from_pretrained(local_model("tiny-qwen2"))
    expected = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload().state_dict()
    final = load_file(out / "final" / "model.safetensors")
    assert set(final) == set(expected)
    assert all(torch.allclose(final[k], expected[k]) for k in final)
    initial = AutoModelForCausalLM.from_pretrained(local_model("tiny-qwen2")).state_dict()
    assert any(not torch.equal(final[k], initial[k]) for k in final)  # the adapter moved them


def test_a_resume_that_trains_nothing_keeps_the_recorded_minutes(tmp_path: Path) -> None:
    import json

    from embodied_r_training.rl.runs import SUMMARY_FILE, TrainResult, write_summary

    checkpoint = tmp_path / "checkpoint-36"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 36}))

    def result(minutes: float, resumed_from: str | None) -> TrainResult:
        return TrainResult(tmp_path, tmp_path / "final", 36, minutes, resumed_from, {}, None)

    write_summary(result(36.9, None))  # the training itself
    again = result(0.2, str(checkpoint))  # resumed at its last step: nothing left to train
    write_summary(again)
    assert again.minutes == 36.9
    assert json.loads((tmp_path / SUMMARY_FILE).read_text())["minutes"] == 36.9
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 30}))
    later = result(5.0, str(checkpoint))  # resumed earlier: it trained, its own minutes count
    write_summary(later)
    assert later.minutes == 5.0
