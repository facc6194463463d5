"""One GPU check, side by side in one run, on a fresh GPU box with no hub.

  (a) perception latency against ``vllm serve`` of a Qwen2.5-VL-7B-shaped model with dummy
      weights (``--load-format dummy``) instead of the emulated endpoint of
      ``bench/perception_latency.py``: the same question over 8, 16 and 32 key frames, the
      VLM calls one after another and all at once, and the re-ask after one new key frame;
  (b) three GRPO steps of the ``paper`` recipe's shape (``bench/grpo_gpu.py``: Qwen2.5-3B
      shape, group size 8, 32 completions a step, fp32 master weights with bf16 autocast), with
      TRL's generation and with vLLM colocated rollouts, steps per minute each;
  (c) whether GRPO moves the weights on CUDA: the fraction of sampled weights each step at lr
      5e-7 changed (>= 99 %), and peak GPU memory, from the runs of (b);
  (d) the released reasoner's reasoning latency (p50, a 700-token prompt and 160 new tokens) at
      its 3B shape with random weights: transformers bf16, llama.cpp CUDA with every layer
      offloaded, and vLLM where it is installed (``bench/_reasoner_latency.py``).

``--parts`` picks the checks (default all); ``--parts reasoning`` is (d) alone, one run of well
under 8 minutes on an H100 or H200 with no set-up and no hub (vLLM is used where this
interpreter, ``--vllm-python`` or an earlier run's environment has it).

Everything the check needs is built here: the 7B-shaped VL model directory (config, the
project's offline BPE tokenizer with the Qwen special tokens and a VL chat template, an image
processor config; no weights, vLLM draws dummy ones), and, since vLLM pins its own torch, a
separate virtual environment for vLLM (``--vllm-python`` reuses one; ``--wheelhouse`` installs
from a local wheel folder on a box without an index). The first creation of that environment
(minutes of downloads) is reported apart and is not counted in the 8-minute bound.

Bounds (exit 1 when one is missed): 32 key frames all at once <= 2 x the mean single VLM call;
every GRPO step changes >= 99 % of the sampled weights; every engine of (d) that ran made 160
tokens from 700 with no vision weights loaded; the checks run (without the first environment
set-up) <= ``--budget-s`` (480 s).

  python bench/gpu_check.py [--workdir /tmp/gpu-check] [--vllm-python PATH] [--json OUT]
  python bench/gpu_check.py --parts reasoning [--json OUT]     # (d) alone
  python bench/gpu_check.py --dry-run    # CPU: build every config and command; (d) on a tiny
                                         # checkpoint of the same layout, on the CPU
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))
import _reasoner_latency as reasoner  # noqa: E402 - a helper module of this folder

PARTS = ("perception", "grpo", "reasoning")
SERVED_NAME = "qwen2.5-vl-7b-dummy"
VLLM_SPEC = "vllm>=0.22,<0.31.1"  # what TRL 1.16 accepts for use_vllm (trl/import_utils.py)
#: the vLLM environment: vLLM with its own torch, and what the project and TRL need beside it
VENV_PACKAGES = (VLLM_SPEC, "trl==1.16.0", "datasets>=5", "peft>=0.21", "accelerate>=1.0",
                 "pydantic>=2", "pyyaml", "opencv-python-headless", "openai>=2", "tqdm",
                 "pillow", "numpy", "pandas", "tensorboard", "matplotlib", "rosbags",
                 "gguf")
BUDGET_S = 480.0
FRAMES = (8, 16, 32)

# Qwen2.5-VL-7B-Instruct's shape (its config.json)
TEXT_7B = {
    "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "max_position_embeddings": 128000, "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                        "mrope_section": [16, 24, 24]},
}
VISION_7B = {
    "depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
    "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
    "out_hidden_size": 3584, "fullatt_block_indexes": [7, 15, 23, 31], "hidden_act": "silu",
}
# a Qwen2-VL style template: image parts become <|vision_start|><|image_pad|><|vision_end|>
VL_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] in ('image', 'image_url') %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_vl_model_dir(dest: Path) -> dict[str, Any]:
    """The 7B-shaped Qwen2.5-VL directory vLLM serves with dummy weights (no weight files)."""
    from transformers import Qwen2_5_VLConfig

    from embodied_r_ros.core.backends.offline import build_tokenizer

    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.chat_template = VL_TEMPLATE
    tid = tokenizer.convert_tokens_to_ids
    config = Qwen2_5_VLConfig(
        text_config={**TEXT_7B, "bos_token_id": None, "eos_token_id": tid("<|im_end|>"),
                     "pad_token_id": tid("<|endoftext|>")},
        vision_config=VISION_7B,
        image_token_id=tid("<|image_pad|>"),
        video_token_id=tid("<|video_pad|>"),
        vision_start_token_id=tid("<|vision_start|>"),
        vision_end_token_id=tid("<|vision_end|>"),
        tie_word_embeddings=False,
        dtype="bfloat16",
        architectures=["Qwen2_5_VLForConditionalGeneration"],
    )
    config.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    processor = {
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
        "do_resize": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True,
        "rescale_factor": 1 / 255, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
        "min_pixels": 3136, "max_pixels": 12845056,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
    }
    (dest / "preprocessor_config.json").write_text(json.dumps(processor, indent=1))
    return {"dir": str(dest), "vocab": len(tokenizer), "image_token_id": tid("<|image_pad|>")}


def check_vl_model_dir(path: Path) -> list[str]:
    """What is wrong with a built model directory (empty: nothing)."""
    from transformers import AutoConfig, AutoTokenizer

    problems = []
    config = AutoConfig.from_pretrained(path)
    text = config.text_config
    if (text.hidden_size, text.num_hidden_layers, config.vision_config.out_hidden_size) != (
            3584, 28, 3584):
        problems.append("not the Qwen2.5-VL-7B shape")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if len(tokenizer) > text.vocab_size:
        problems.append("tokenizer larger than the vocabulary")
    message = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}},
                                            {"type": "text", "text": "what?"}]}]
    rendered = tokenizer.apply_chat_template(message, tokenize=False, add_generation_prompt=True)
    pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    if rendered.count("<|image_pad|>") != 1 or config.image_token_id != pad:
        problems.append("chat template / image token do not match")
    return problems


def venv_commands(venv: Path, wheelhouse: Path | None) -> list[list[str]]:
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    if wheelhouse:
        pip += ["--no-index", "--find-links", str(wheelhouse)]
    return [[sys.executable, "-m", "venv", str(venv)], [*pip, *VENV_PACKAGES]]


def serve_command(python: str, model_dir: Path, port: int, memory: float) -> list[str]:
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--load-format", "dummy", "--served-model-name", SERVED_NAME, "--port", str(port),
            "--host", "127.0.0.1", "--dtype", "bfloat16", "--max-model-len", "8192",
            "--gpu-memory-utilization", str(memory), "--limit-mm-per-prompt",
            json.dumps({"image": 2}), "--enforce-eager", "--seed", "0"]


def grpo_command(python: str, mode: str, out: Path, extra: Sequence[str] = ()) -> list[str]:
    return [python, str(BENCH / "grpo_gpu.py"), "--steps", "3", "--vllm", mode,
            "--json", str(out), *extra]


def _env(python: str) -> dict[str, str]:
    """The project on the path of another interpreter (the vLLM environment)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "training"),
                                         env.get("PYTHONPATH", "")])
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


@contextlib.contextmanager
def vllm_server(cmd: list[str], env: dict[str, str], port: int, log: Path,
                timeout_s: float = 300.0) -> Iterator[str]:
    """``vllm serve`` in the background until ``/v1/models`` answers; stopped on exit."""
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
        url = f"http://127.0.0.1:{port}/v1"
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"vllm serve exited {proc.returncode}; see {log}")
                try:
                    with urllib.request.urlopen(f"{url}/models", timeout=2):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"vllm serve not up after {timeout_s:.0f} s; see {log}") from None
                    time.sleep(2)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def perception_config(url: str, vlm_tokens: int, cache: Path, **perception: Any) -> dict:
    """The pipeline config of (a): the served model over the OpenAI API, greedy."""
    return {
        "perception": {"backend": "vlm", **perception,
                       "vlm": {"backend": "openai", "model": SERVED_NAME, "base_url": url,
                               "max_concurrency": 64, "timeout_s": 300, "retries": 0,
                               "max_new_tokens": vlm_tokens, "temperature": 0.0}},
        "reasoning": {"model": {"model": "timed-lm"}},
        "cache": {"dir": str(cache)},
    }


def perception_latency(url: str, vlm_tokens: int, lm_latency: float, cache: Path) -> dict:
    """(a): ``bench/perception_latency.py``'s timings against the served model."""
    sys.path.insert(0, str(BENCH))
    import perception_latency as pl

    from embodied_r_ros.core.backends.factory import create_backend
    from embodied_r_ros.core.pipeline import EmbodiedR
    from embodied_r_ros.core.profiles import config_from_dict

    def pipeline(name: str, **perception: Any) -> EmbodiedR:
        cfg = config_from_dict(perception_config(url, vlm_tokens, cache / name, **perception))
        assert cfg.perception.vlm is not None
        return EmbodiedR(cfg, vlm=create_backend(cfg.perception.vlm),
                         lm=pl.TimedLM(lm_latency), load_models=False)

    rows = []
    for n in FRAMES:
        images = pl.frames(n + 1, seed=n)
        stamps = [float(i) for i in range(n + 1)]
        t_seq, _ = pl.ask(pipeline(f"seq{n}", concurrency=1), images[:n], stamps[:n])
        conc = pipeline(f"conc{n}")
        t_conc, _ = pl.ask(conc, images[:n], stamps[:n])
        t_slide, _ = pl.ask(conc, images[1:], stamps[1:])
        per_call = (t_seq - lm_latency) / n
        rows.append({"key_frames": n, "sequential_s": round(t_seq, 2),
                     "concurrent_s": round(t_conc, 2), "reask_s": round(t_slide, 2),
                     "single_call_s": round(per_call, 3),
                     "concurrent_over_single_call": round((t_conc - lm_latency) / per_call, 2)})
    return {"rows": rows, "ok": rows[-1]["concurrent_over_single_call"] <= 2.0}


def _run_json(cmd: list[str], env: dict[str, str], out: Path, log: Path) -> dict[str, Any]:
    with log.open("w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env).returncode
    result = json.loads(out.read_text()) if out.is_file() else {"error": f"no result; see {log}"}
    result["rc"] = rc
    return result


def plan(args: argparse.Namespace) -> dict[str, Any]:
    work = args.workdir
    venv = work / "vllm-env"
    python = args.vllm_python or str(venv / "bin" / "python")
    needs_venv = not args.vllm_python and ({"perception", "grpo"} & set(args.parts))
    checkpoint = work / "embodied-r-3b" / "Weight_1"
    return {
        "model_dir": str(work / "qwen2.5-vl-7b-dummy"),
        "setup": venv_commands(venv, args.wheelhouse) if needs_venv else [],
        "serve": serve_command(python, work / "qwen2.5-vl-7b-dummy", args.port, args.vllm_memory),
        "grpo": {"trl-generate": grpo_command(sys.executable, "none", work / "grpo-trl.json"),
                 "vllm-colocate": grpo_command(python, "colocate", work / "grpo-vllm.json")},
        "reasoning": {"checkpoint": str(checkpoint),
                      "vllm_serve": reasoner.vllm_serve_command(python, checkpoint,
                                                                args.port + 1, 0.3)},
    }


def _has_vllm(python: str) -> bool:
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


def reasoning_latency(args: argparse.Namespace, gpu: bool) -> dict[str, Any]:
    """(d); on the CPU (the dry run) on a tiny checkpoint of the released layout, 1 repeat."""
    work = args.workdir
    checkpoint = reasoner.write_checkpoint(work / ("embodied-r-3b" if gpu else "embodied-r-tiny"),
                                           tiny=not gpu, device="cuda" if gpu else "cpu")
    ids = reasoner.prompt_ids(checkpoint)
    repeats = args.repeats if gpu else 1
    out: dict[str, Any] = {"checkpoint": str(checkpoint), "prompt_tokens": len(ids),
                           "engines": {}}
    engines = out["engines"]
    engines["transformers"] = reasoner.transformers_latency(checkpoint, ids, repeats, gpu)
    engines["llamacpp"] = reasoner.llamacpp_latency(checkpoint, ids, repeats, gpu,
                                                    work / "llamacpp-cache")
    python = reasoner.vllm_python(args.vllm_python, work / "vllm-env", _has_vllm)
    if not gpu:
        engines["vllm"] = {"skipped": "dry run", "installed": python is not None}
    elif python is None:
        engines["vllm"] = {"skipped": "vLLM is not installed (--vllm-python names one)"}
    else:
        cmd = reasoner.vllm_serve_command(python, checkpoint, args.port + 1, 0.3)
        try:
            with vllm_server(cmd, _env(python), args.port + 1, work / "vllm-3b.log") as url:
                engines["vllm"] = reasoner.vllm_latency(url, ids, repeats)
        except RuntimeError as exc:
            engines["vllm"] = {"error": str(exc)}
    ran = [r for r in engines.values() if "p50_s" in r]
    lengths = len(ids) == reasoner.PROMPT_TOKENS and all(
        r["new_tokens"] == reasoner.NEW_TOKENS for r in ran)
    text_only = engines["transformers"].get("visual_params") == 0
    failed = any("error" in r for r in engines.values())
    out["ok"] = bool(ran) and lengths and text_only and not failed
    return out


def dry_run(args: argparse.Namespace) -> dict[str, Any]:
    """Build every config and command; check what can be checked without a GPU."""
    sys.path.insert(0, str(BENCH))
    import grpo_gpu

    from embodied_r_ros.core.profiles import config_from_dict

    steps = plan(args)
    model = build_vl_model_dir(Path(steps["model_dir"]))
    problems = check_vl_model_dir(Path(steps["model_dir"]))
    url = f"http://127.0.0.1:{args.port}/v1"
    for mode in ({"concurrency": 1}, {}):  # validated as the full run builds them
        config_from_dict(perception_config(url, args.vlm_tokens, args.workdir / "cache", **mode))
    reasoning: dict[str, Any] = {"shape": reasoner.shape_counts()}
    if "reasoning" in args.parts:
        reasoning.update(reasoning_latency(args, gpu=False))
        if not reasoning["ok"]:
            problems.append(f"reasoning latency: {reasoning['engines']}")
    grpo: dict[str, Any] = {}
    for mode, cmd in steps["grpo"].items():
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = grpo_gpu.main([*cmd[2:], "--dry-run"])
        checked = json.loads(buf.getvalue().strip().splitlines()[-1])
        grpo[mode] = {"rc": rc, "unknown": checked["unknown"], "kwargs": checked["kwargs"]}
        if rc:
            problems.append(f"grpo {mode}: GRPOConfig has no {checked['unknown']}")
    return {"check": "gpu_check", "dry_run": True, "plan": steps, "model": model,
            "grpo": grpo, "reasoning": reasoning, "problems": problems, "ok": not problems}


def full_run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device (use --dry-run on a machine without one)")
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    steps = plan(args)
    report: dict[str, Any] = {"check": "gpu_check", "device": torch.cuda.get_device_name(0)}
    t0 = time.perf_counter()
    for cmd in steps["setup"]:
        if cmd[1:3] == ["-m", "venv"] and Path(cmd[-1], "bin", "python").exists():
            continue  # made by an earlier run
        subprocess.run(cmd, check=True)
    report["setup_s"] = round(time.perf_counter() - t0, 1)
    start = time.perf_counter()
    python = steps["serve"][0]
    env = _env(python)
    oks = []
    if "perception" in args.parts:
        build_vl_model_dir(Path(steps["model_dir"]))
        try:
            with vllm_server(steps["serve"], env, args.port, work / "vllm-serve.log") as url:
                report["perception"] = perception_latency(url, args.vlm_tokens, 0.5,
                                                          work / "cache")
        except RuntimeError as exc:
            report["perception"] = {"error": str(exc), "ok": False}
        oks.append(bool(report["perception"].get("ok")))
    if "grpo" in args.parts:
        grpo = {}
        for mode, cmd in steps["grpo"].items():
            cmd_env = env if cmd[0] == python else dict(os.environ)
            grpo[mode] = _run_json(cmd, cmd_env, Path(cmd[cmd.index("--json") + 1]),
                                   work / f"grpo-{mode}.log")
        report["grpo"] = grpo
        oks.append(all(r.get("bound", {}).get("ok") for r in grpo.values()))
    if "reasoning" in args.parts:
        report["reasoning"] = reasoning_latency(args, gpu=True)
        oks.append(report["reasoning"]["ok"])
    report["check_s"] = round(time.perf_counter() - start, 1)
    report["ok"] = all(oks) and report["check_s"] <= args.budget_s
    return report


def print_table(report: dict[str, Any]) -> None:
    print(f"GPU check on {report.get('device')}: setup {report.get('setup_s')} s (not counted), "
          f"checks {report.get('check_s')} s (bound {BUDGET_S:g} s)")
    perception = report.get("perception", {})
    if not perception:
        pass
    elif "rows" in perception:
        print("(a) perception against vllm serve (Qwen2.5-VL-7B shape, dummy weights)")
        print(" | ".join(f"{h:>16s}" for h in ("key frames", "sequential", "concurrent",
                                               "re-ask", "one call", "conc / one call")))
        for r in perception["rows"]:
            print(" | ".join(f"{c:>16s}" for c in (
                str(r["key_frames"]), f"{r['sequential_s']} s", f"{r['concurrent_s']} s",
                f"{r['reask_s']} s", f"{r['single_call_s']} s",
                f"{r['concurrent_over_single_call']} (<= 2)")))
    else:
        print(f"(a) perception: {perception.get('error')}")
    if "grpo" in report:
        print("(b)+(c) GRPO, paper shape, 3 steps")
        print(" | ".join(f"{h:>18s}" for h in ("rollouts", "steps / min", "weights changed",
                                               "peak GiB", "status")))
    for mode, r in report.get("grpo", {}).items():
        changed = r.get("weights_changed_per_step") or []
        print(" | ".join(f"{c:>18s}" for c in (
            mode, str(r.get("steps_per_minute")), f"min {min(changed):.4f}" if changed else "-",
            str(r.get("peak_gpu_memory_gib")), "ok" if r.get("bound", {}).get("ok") else
            f"FAILED rc {r.get('rc')} {r.get('error', '')}")))
    reasoning = report.get("reasoning", {})
    if reasoning:
        print(f"(d) reasoning latency, released reasoner's 3B shape, random weights: "
              f"{reasoning['prompt_tokens']} prompt tokens, {reasoner.NEW_TOKENS} new")
        for engine, r in reasoning["engines"].items():
            status = (f"p50 {r['p50_s']} s ({r['new_tokens']} tokens)" if "p50_s" in r
                      else r.get("skipped") or r.get("error"))
            print(f"{engine:>14s} | {status}")
    print("OK" if report.get("ok") else "MISSED")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true",
                   help="build every config and command and check them; run nothing (CPU)")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/gpu-check"))
    p.add_argument("--vllm-python", help="the python of an environment that has vLLM already")
    p.add_argument("--wheelhouse", type=Path, help="install vLLM from this wheel folder")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--vllm-memory", type=float, default=0.5,
                   help="vllm serve's share of GPU memory for (a)")
    p.add_argument("--vlm-tokens", type=int, default=64, help="new tokens per VLM reply")
    p.add_argument("--budget-s", type=float, default=BUDGET_S)
    p.add_argument("--parts", type=lambda text: text.split(","), default=list(PARTS),
                   help=f"the checks to run, comma-separated (default {','.join(PARTS)})")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per engine in (d)")
    p.add_argument("--json", type=Path, help="also write the report here")
    args = p.parse_args(argv)
    if unknown := sorted(set(args.parts) - set(PARTS)):
        p.error(f"--parts: unknown {', '.join(unknown)} (known: {', '.join(PARTS)})")
    if args.dry_run:
        report = dry_run(args)
        print(json.dumps(report, default=str))
    else:
        try:
            report = full_run(args)
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            print(f"gpu_check: {exc}", file=sys.stderr)
            return 2
        print_table(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    if shutil.which("nvidia-smi") is None and "--dry-run" not in sys.argv:
        print("gpu_check: no nvidia-smi on this machine; --dry-run checks the plan on CPU",
              file=sys.stderr)
    sys.exit(main())
