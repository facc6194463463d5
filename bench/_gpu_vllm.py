"""The GPU check's vLLM parts, for machines that have vLLM (``bench/gpu_check.py --vllm``).

  perception    ``vllm serve`` of a Qwen2.5-VL-7B-shaped model with dummy weights
                (``--load-format dummy``) instead of the emulated endpoint of
                ``bench/perception_latency.py``: the same question over 8, 16 and 32 key frames,
                the VLM calls one after another and all at once, and the re-ask after one new
                key frame (bound: 32 key frames all at once <= 2 x the mean single call);
  GRPO          ``bench/grpo_gpu.py --vllm colocate``, vLLM generating the rollouts inside the
                trainer (vLLM 0.22-0.31 beside TRL 1.16);
  reasoning     the released reasoner's latency through ``vllm serve`` (``_reasoner_latency``).

Everything vLLM serves is built here: the 7B-shaped VL model directory (config, the project's
offline BPE tokenizer with the Qwen special tokens and a VL chat template, an image processor
config; no weights, vLLM draws dummy ones).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SERVED_NAME = "qwen2.5-vl-7b-dummy"
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

    from embodied_r_ros.backends.tiny_models import build_tokenizer

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


def serve_command(python: str, model_dir: Path, port: int, memory: float) -> list[str]:
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--load-format", "dummy", "--served-model-name", SERVED_NAME, "--port", str(port),
            "--host", "127.0.0.1", "--dtype", "bfloat16", "--max-model-len", "8192",
            "--gpu-memory-utilization", str(memory), "--limit-mm-per-prompt",
            json.dumps({"image": 2}), "--enforce-eager", "--seed", "0"]


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
    """The perception part's pipeline config: the served model over the OpenAI API, greedy."""
    return {
        "perception": {"backend": "vlm", **perception,
                       "vlm": {"backend": "openai", "model": SERVED_NAME, "base_url": url,
                               "max_concurrency": 64, "timeout_s": 300, "retries": 0,
                               "max_new_tokens": vlm_tokens, "temperature": 0.0}},
        "reasoning": {"model": {"model": "timed-lm"}},
        "cache": {"dir": str(cache)},
    }


def validate_perception_configs(port: int, vlm_tokens: int, cache: Path) -> None:
    """Both perception configs (one call at a time, all at once), validated as the run builds
    them."""
    from embodied_r_ros.core.profiles import config_from_dict

    url = f"http://127.0.0.1:{port}/v1"
    for mode in ({"concurrency": 1}, {}):
        config_from_dict(perception_config(url, vlm_tokens, cache, **mode))


def perception_latency(url: str, vlm_tokens: int, lm_latency: float, cache: Path) -> dict:
    """``bench/perception_latency.py``'s timings against the served model."""
    import perception_latency as pl  # beside this module

    from embodied_r_ros.backends.factory import create_backend, load_pipeline
    from embodied_r_ros.core.pipeline import EmbodiedR
    from embodied_r_ros.core.profiles import config_from_dict

    def pipeline(name: str, **perception: Any) -> EmbodiedR:
        cfg = config_from_dict(perception_config(url, vlm_tokens, cache / name, **perception))
        assert cfg.perception.vlm is not None
        return load_pipeline(cfg, vlm=create_backend(cfg.perception.vlm),
                             lm=pl.TimedLM(lm_latency))

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




def has_vllm(python: str, env: dict[str, str]) -> bool:
    """Whether ``python`` (with ``env``) can import vLLM."""
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    return subprocess.run([python, "-c", code], capture_output=True, env=env).returncode == 0
