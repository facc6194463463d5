"""What the reasoner's GGUF files weigh, and the memory llama.cpp needs for them, read from the
files' own tensor shapes and types.

Per file: the bytes of every tensor (its elements x the bytes of its type's block / the block's
elements, from ``gguf``'s table of llama.cpp's block sizes), the tensor types used and the
bytes per weight, the file's size on disk, and the memory to run it: the weights plus the
key/value cache in float16 (2 x layers x KV heads x head size x 2 bytes a token, from the
file's metadata) at 4096 and 8192 tokens of context. llama.cpp's compute buffers (a few hundred
MB at a 512-token batch) and the CUDA context come on top and are not counted.

``--build 3b`` first writes a random-weight checkpoint of the released reasoner's decoder shape
(Qwen2.5-VL-3B's text model: hidden 2048, 36 layers, 16 heads, 2 KV heads, intermediate 11008,
vocabulary 151936, tied embeddings; bf16) into ``--workdir`` (a temporary folder by default)
and exports it with the project's GGUF writer to float16, Q8_0, Q4_K_M and Q4_0 (llama.cpp's
quantiser), then reads those files (about 25 GB of disk and 10 GB of memory at the peak).
``--build tiny`` does the same at a tiny shape (a check that the script runs).

Run: ``.venv/bin/python bench/gguf_sizes.py FILE.gguf ... | --build 3b [--workdir DIR]
[--json PATH] [--md PATH]``
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _figures import add_json_option, without_json, write_figures
from _reasoner_latency import TEXT_3B

BUILDS = ("float16", "int8", "q4_k_m", "q4_0")
CONTEXTS = (4096, 8192)
#: the released checkpoint's text model (the latency check's shape) as a plain Qwen2: tied
#: embeddings, rope without the multimodal sections
QWEN25_3B_TEXT = {
    **TEXT_3B, "tie_word_embeddings": True,
    "rope_parameters": {k: v for k, v in TEXT_3B["rope_parameters"].items()
                        if k != "mrope_section"},
}
TINY_TEXT = {**QWEN25_3B_TEXT, "hidden_size": 256, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
             "vocab_size": 1024}


def _field(reader: Any, key: str) -> Any:
    field = reader.fields[key]
    return field.parts[field.data[0]][0]


def describe(path: Path) -> dict[str, Any]:
    """Sizes and memory of one GGUF file, from its tensors' shapes and types."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    arch = bytes(reader.fields["general.architecture"].parts[
        reader.fields["general.architecture"].data[0]]).decode()
    by_type: dict[str, dict[str, int]] = {}
    for tensor in reader.tensors:
        block, size = gguf.GGML_QUANT_SIZES[tensor.tensor_type]
        elements = int(tensor.n_elements)
        entry = by_type.setdefault(tensor.tensor_type.name, {"tensors": 0, "weights": 0,
                                                             "bytes": 0})
        entry["tensors"] += 1
        entry["weights"] += elements
        entry["bytes"] += elements // block * size
    weights = sum(e["weights"] for e in by_type.values())
    tensor_bytes = sum(e["bytes"] for e in by_type.values())
    layers = int(_field(reader, f"{arch}.block_count"))
    heads = int(_field(reader, f"{arch}.attention.head_count"))
    kv_heads = int(_field(reader, f"{arch}.attention.head_count_kv"))
    key = f"{arch}.attention.key_length"
    head_dim = (int(_field(reader, key)) if key in reader.fields
                else int(_field(reader, f"{arch}.embedding_length")) // heads)
    kv_per_token = 2 * layers * kv_heads * head_dim * 2  # K and V, float16
    return {
        "file": str(path), "file_mb": round(path.stat().st_size / 2**20, 1),
        "tensor_mb": round(tensor_bytes / 2**20, 1), "weights": weights,
        "bits_per_weight": round(8 * tensor_bytes / weights, 2), "types": by_type,
        "kv_bytes_per_token": kv_per_token,
        "memory_mb": {str(ctx): round((tensor_bytes + kv_per_token * ctx) / 2**20, 1)
                      for ctx in CONTEXTS},
    }


def build(root: Path, tiny: bool) -> list[Path]:
    """A random checkpoint of the decoder's shape, exported to every type; the GGUF paths."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from embodied_r_ros.backends.gguf_export import write_gguf
    from embodied_r_ros.backends.tiny_models import build_tokenizer

    source = root / "checkpoint"
    if not (source / "config.json").is_file():
        tokenizer = build_tokenizer()
        ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
        config = Qwen2Config(**(TINY_TEXT if tiny else QWEN25_3B_TEXT), bos_token_id=None,
                             eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
        torch.manual_seed(0)
        model = Qwen2ForCausalLM._from_config(config, dtype=torch.bfloat16)
        model.save_pretrained(source)
        tokenizer.save_pretrained(source)
        del model
    out = []
    for quantization in BUILDS:
        dest = root / f"decoder-{quantization}.gguf"
        if not dest.is_file():
            t0 = time.perf_counter()
            write_gguf(source, dest, quantization)
            print(f"{dest.name}: written in {time.perf_counter() - t0:.0f} s", flush=True)
        out.append(dest)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| file | tensor types | bits / weight | file MiB | memory MiB, 4096 tokens | "
             "memory MiB, 8192 tokens |", "|---|---|---|---|---|---|"]
    for r in rows:
        types = ", ".join(sorted(t for t in r["types"] if t != "F32"))
        lines.append(f"| {Path(r['file']).name} | {types} | {r['bits_per_weight']} | "
                     f"{r['file_mb']:.0f} | {r['memory_mb']['4096']:.0f} | "
                     f"{r['memory_mb']['8192']:.0f} |")
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    """The short report: what was read, the table, what the memory leaves out."""
    kv = rows[0]["kv_bytes_per_token"] if rows else 0
    return "\n\n".join([
        "# GGUF sizes and memory",
        f"`{command}`: every tensor's bytes from its shape and type (llama.cpp's block sizes, "
        "through `gguf`), the file's size, and the memory to run it: the weights plus the "
        f"float16 key/value cache ({kv} bytes a token). llama.cpp's compute buffers (a few "
        "hundred MiB at a 512-token batch) and the CUDA context are not counted.",
        table(rows),
    ]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="GGUF files to read")
    parser.add_argument("--build", choices=("3b", "tiny"),
                        help="export a random decoder of this shape to every type first")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where --build writes (default: a temporary folder)")
    parser.add_argument("--md", type=Path, default=None, help="also write the table here")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if not args.files and not args.build:
        parser.error("name GGUF files, or --build 3b")
    with tempfile.TemporaryDirectory(prefix="gguf-sizes-") as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        files = list(args.files) + (build(root, args.build == "tiny") if args.build else [])
        rows = [describe(path) for path in files]
    text = table(rows)
    print(text)
    write_figures(args.json, "gguf_sizes", argv, args, {"files": rows})
    if args.md:
        command = shlex.join(["bench/gguf_sizes.py", *without_json(
            sys.argv[1:] if argv is None else argv)])
        args.md.write_text(markdown(rows, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
