"""The GPU check's reasoning part: the released reasoner's reasoning latency, with random weights
at its shape and no hub.

A Qwen2.5-VL-3B-shaped checkpoint (text: hidden 2048, 36 layers, 16 heads, 2 KV heads,
intermediate 11008, vocabulary 151936, tied embeddings; the 3B vision tower too) is written with
random bf16 weights in the released repository's layout (``Weight_1/``, the legacy
``model.layers.*`` / ``visual.*`` keys) and loaded the way the profiles load it:

  transformers  the ``workstation``/``server`` route: its text decoder in bf16 on CUDA
  vLLM          the ``paper`` route: ``vllm serve`` text only (``--limit-mm-per-prompt``
                image 0, video 0; ``--load-format dummy``), where vLLM is installed

llama.cpp with CUDA (the ``jetson`` route) is not timed here: llama-cpp-python compiles from
source on install, and neither its source nor a build travels to a lent GPU machine
(docs/installation.md builds it on a workstation or a Jetson).

Every engine is given the same 700 prompt tokens (the reasoning prompt of the released prompt
set, filled with perception-like lines) and makes exactly 160 new tokens greedily (end tokens
ignored: random weights would stop anywhere), with its prefix cache out of play, so each run
prefills in full. p50 over ``repeats`` runs after one warm-up. On a CPU (``--dry-run``) the same
code runs on a tiny checkpoint of the same layout. Bound: 160 tokens made from 700 with no
vision weights loaded.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROMPT_TOKENS = 700
NEW_TOKENS = 160
SERVED_NAME = "embodied-r-3b-dummy"
TEXT_3B = {
    "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 11008,
    "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2,
    "max_position_embeddings": 128000, "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                        "mrope_section": [16, 24, 24]},
}
VISION_3B = {
    "depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
    "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
    "out_hidden_size": 2048, "fullatt_block_indexes": [7, 15, 23, 31], "hidden_act": "silu",
}
TEXT_TINY = {
    "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                        "mrope_section": [2, 3, 3]},
}
VISION_TINY = {
    "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 14,
    "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
    "out_hidden_size": 64, "fullatt_block_indexes": [1],
}


def vl_config(tokenizer: Any, tiny: bool) -> Any:
    from transformers import Qwen2_5_VLConfig

    tid = tokenizer.convert_tokens_to_ids
    return Qwen2_5_VLConfig(
        text_config={**(TEXT_TINY if tiny else TEXT_3B), "bos_token_id": None,
                     "eos_token_id": tid("<|im_end|>"), "pad_token_id": tid("<|endoftext|>")},
        vision_config=VISION_TINY if tiny else VISION_3B,
        image_token_id=tid("<|image_pad|>"), video_token_id=tid("<|video_pad|>"),
        vision_start_token_id=tid("<|vision_start|>"),
        vision_end_token_id=tid("<|vision_end|>"), tie_word_embeddings=not tiny,
        dtype="float32" if tiny else "bfloat16",
        architectures=["Qwen2_5_VLForConditionalGeneration"])


def shape_counts() -> dict[str, int]:
    """Parameters of the 3B shape (on the meta device: nothing allocated), text and vision."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from embodied_r_ros.backends.tiny_models import build_tokenizer

    with torch.device("meta"):
        model = Qwen2_5_VLForConditionalGeneration(vl_config(build_tokenizer(), tiny=False))
    text = sum(p.numel() for n, p in model.named_parameters() if "visual" not in n)
    return {"text_params": text,
            "vision_params": sum(p.numel() for p in model.parameters()) - text}


def write_checkpoint(root: Path, tiny: bool, device: str) -> Path:
    """``root/Weight_1``: a random checkpoint of the released layout (``save_pretrained``
    writes the legacy keys); returns that folder."""
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLForConditionalGeneration

    from embodied_r_ros.backends.tiny_models import build_tokenizer

    dest = root / "Weight_1"
    tokenizer = build_tokenizer()
    config = vl_config(tokenizer, tiny)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(
            config, dtype=torch.float32 if tiny else torch.bfloat16)
    tid = tokenizer.convert_tokens_to_ids
    model.generation_config = GenerationConfig(
        eos_token_id=[tid("<|im_end|>"), tid("<|endoftext|>")],
        pad_token_id=tid("<|endoftext|>"), do_sample=False)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return dest


def prompt_ids(checkpoint: Path, tokens: int = PROMPT_TOKENS) -> list[int]:
    """Exactly ``tokens`` token ids: the released system prompt and a perception-like user text
    under the checkpoint's chat template, the text cut to fit."""
    from transformers import AutoTokenizer

    from embodied_r_ros.core.config import CONFIG_DIR
    from embodied_r_ros.core.prompts import load_prompts
    from embodied_r_ros.core.reasoning import build_messages

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    line = "After rotate left, Observe: a red door ahead-left, a white car to the right. "
    text = line * (4 * tokens // len(tokenizer(line)["input_ids"]))
    messages = build_messages(text, load_prompts(CONFIG_DIR / "prompts-released.yaml"))
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    # the cut prompt still ends the user's turn and opens the assistant's (Qwen's chat format)
    suffix = tokenizer("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    end = suffix["input_ids"]
    return [int(i) for i in ids[: tokens - len(end)] + end]


def timed(run: Callable[[], int], repeats: int, sync: Callable[[], None]) -> dict[str, Any]:
    """``run`` once to warm up, then ``repeats`` times: p50 seconds and the tokens made."""
    made = run()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        made = run()
        sync()
        times.append(time.perf_counter() - t0)
    return {"p50_s": round(statistics.median(times), 3), "runs_s": [round(t, 3) for t in times],
            "new_tokens": made}


def meets_bound(result: dict[str, Any], prompt_tokens: int) -> bool:
    """700 prompt tokens in, 160 new ones out, and (where reported) no vision weights."""
    return (prompt_tokens == PROMPT_TOKENS and result.get("new_tokens") == NEW_TOKENS
            and result.get("visual_params", 0) == 0)


def transformers_latency(checkpoint: Path, ids: list[int], repeats: int, gpu: bool,
                         new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """The ``workstation`` route: the text decoder in bf16 on CUDA (fp32 on the CPU)."""
    import torch

    from embodied_r_ros.backends.factory import create_backend
    from embodied_r_ros.core.config import ModelConfig

    cfg = ModelConfig(model=str(checkpoint), dtype="bfloat16" if gpu else "float32",
                      device="cuda" if gpu else "cpu", max_new_tokens=new_tokens, batch_size=1)
    if gpu:
        torch.cuda.reset_peak_memory_stats()  # the checkpoint's writing is not the engine's
    t0 = time.perf_counter()
    lm = create_backend(cfg, text_only=True)
    load_s = time.perf_counter() - t0
    x = torch.tensor([ids], device=lm.device)

    def once() -> int:
        with torch.inference_mode():
            out = lm.model.generate(input_ids=x, attention_mask=torch.ones_like(x),
                                    max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                    do_sample=False, pad_token_id=lm.tokenizer.pad_token_id)
        return int(out.shape[1] - x.shape[1])

    result = timed(once, repeats, torch.cuda.synchronize if gpu else (lambda: None))
    result.update(load_s=round(load_s, 1), dtype=str(lm.dtype).removeprefix("torch."),
                  params=sum(p.numel() for p in lm.model.parameters()),
                  visual_params=sum("visual" in n for n, _ in lm.model.named_parameters()))
    if gpu:
        result["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    lm.close()
    if gpu:
        torch.cuda.empty_cache()  # the checks after this one get the memory back
    return result


def vllm_serve_command(python: str, checkpoint: Path, port: int, memory: float) -> list[str]:
    """``vllm serve`` of the checkpoint text only, random (dummy) weights, no prefix cache."""
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint),
            "--load-format", "dummy", "--served-model-name", SERVED_NAME, "--port", str(port),
            "--host", "127.0.0.1", "--dtype", "bfloat16", "--max-model-len", "4096",
            "--gpu-memory-utilization", str(memory), "--limit-mm-per-prompt",
            json.dumps({"image": 0, "video": 0}), "--no-enable-prefix-caching", "--seed", "0"]


def vllm_latency(url: str, ids: list[int], repeats: int,
                 new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """The ``paper`` route: the same token ids to the served model's completions endpoint,
    exactly ``new_tokens`` greedy tokens (``min_tokens``, ``ignore_eos``)."""
    body = json.dumps({"model": SERVED_NAME, "prompt": ids, "max_tokens": new_tokens,
                       "min_tokens": new_tokens, "ignore_eos": True, "temperature": 0.0}).encode()

    def once() -> int:
        req = urllib.request.Request(f"{url}/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            return int(json.loads(resp.read())["usage"]["completion_tokens"])

    return timed(once, repeats, lambda: None)
