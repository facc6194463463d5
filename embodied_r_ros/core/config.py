"""One validated configuration schema for the CLI, the ROS nodes and the trainer.

Unknown keys and invalid values (non-finite numbers, non-HTTP URLs) raise :class:`ConfigError`
naming the key path (``reasoning.model.dtype``). Profiles and users' files are read and layered
into it by :mod:`embodied_r_ros.core.profiles`.
"""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

#: ``config/`` of the repository, reached through the package (``embodied_r_ros/config`` links
#: to it in a source tree; wheels and colcon installs carry it as package data)
CONFIG_DIR = Path(str(files("embodied_r_ros") / "config"))
PROFILES_DIR = CONFIG_DIR / "profiles"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENVNAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: the most key frames a question is answered from (the official clamp's upper bound; the
#: spatial memory's selection starts here too)
KEY_FRAME_BUDGET = 32
#: the newest key frames every selection from the spatial memory includes
LATEST_FRAMES = 4
#: the most seconds between a key frame and the odometry pose it takes
ODOM_TOLERANCE_SEC = 0.2


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the offending key."""


class StrictModel(BaseModel):
    # non-finite numbers (.inf, .nan) fail validation naming the key, like any bad value
    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False
    )


class KeyframeConfig(StrictModel):
    """Key-frame extraction, defaults as in the official code (``train/conver_format/utils.py``)."""

    sample_fps: float = Field(1.0, ge=0.0, description="pre-sampling rate; 0 keeps every frame")
    overlap_threshold: float = Field(0.5, gt=0.0, le=1.0)
    min_frames: int = Field(4, ge=0, description="clamp lower bound; 0 disables")
    max_frames: int = Field(KEY_FRAME_BUDGET, ge=0, description="clamp upper bound; 0 disables")
    n_features: int = Field(500, ge=10, description="ORB features")
    min_matches: int = Field(10, ge=4, description="a frame needs MORE than this many matches")
    ransac_reproj_px: float = Field(5.0, gt=0.0)
    max_side: int = Field(640, ge=0, description="processing resolution (longest side); 0 = native")

    @model_validator(mode="after")
    def _bounds(self) -> KeyframeConfig:
        if self.min_frames and self.max_frames and self.min_frames > self.max_frames:
            raise ValueError("min_frames must not exceed max_frames")
        return self


#: the weights a local engine is built with (CTranslate2 compute types, and the GGUF types
#: llama.cpp takes: LLAMACPP_QUANTIZATIONS)
Quantization = Literal["int8", "int8_float32", "float16", "float32", "q4_0", "q4_k_m"]
#: the weights the llama.cpp backend writes (int8: GGUF Q8_0; q4_0 and q4_k_m: 4-bit types made
#: by llama.cpp's own quantiser)
LLAMACPP_QUANTIZATIONS = ("float32", "float16", "int8", "q4_0", "q4_k_m")
#: what CTranslate2 builds
CT2_QUANTIZATIONS = ("int8", "int8_float32", "float16", "float32")


def check_engine_quantization(backend: str, quantization: str) -> None:
    """Refuse a quantisation the named engine cannot build (a ``ValueError`` for the schema)."""
    engines = {"llamacpp": LLAMACPP_QUANTIZATIONS, "ctranslate2": CT2_QUANTIZATIONS}
    if backend in engines and quantization not in engines[backend]:
        raise ValueError(f"quantization {quantization!r} is not available on backend "
                         f"'{backend}': use one of {', '.join(engines[backend])}")


class ModelConfig(StrictModel):
    """A chat model behind one of the backends in ``backends``."""

    # ctranslate2 / llamacpp: the model converted once to a CPU engine; when the engine is not
    # installed, llamacpp falls back to ctranslate2, and ctranslate2 to transformers
    backend: Literal["transformers", "openai", "vllm", "ctranslate2", "llamacpp"] = "transformers"
    # A hub id, a local directory, or an offline model name (``tiny-qwen2``,
    # ``tiny-qwen2.5-vl``, ``smollm2-135m``) built by ``backends/offline.py``.
    model: str = Field(min_length=1)
    revision: str | None = Field(None, min_length=1, description="hub revision (branch, tag "
                                 "or commit) of a hub id; unset: main")
    subfolder: str | None = Field(None, pattern=r"^([A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*)?$",
                                  description="the checkpoint's folder inside the hub "
                                  "repository or directory (EmbodiedCity/Embodied-R: Weight_1 "
                                  "or Weight_2); unset: the model's default, the root for most")
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    device: str = "auto"
    max_new_tokens: int = Field(512, ge=1, le=32768)
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0: greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, description="0: no top-k filtering")
    repetition_penalty: float = Field(1.0, gt=0.0, le=10.0, description="1: none; above 1 "
                                      "divides the score of every token already in the prompt "
                                      "or the reply (transformers' rule)")
    generation_from_checkpoint: bool = Field(
        False, description="temperature, top_p, top_k, repetition_penalty and do_sample not "
        "set here come from the checkpoint's generation_config.json, as the official inference "
        "takes them (backends/generation.py)")
    batch_size: int = Field(4, ge=1)
    seed: int = 0
    # ctranslate2 / llamacpp backends: weight quantisation (llamacpp: float32, float16, int8
    # = Q8_0, q4_0 or q4_k_m); the CPU cores the engine may use (0: every one this process may
    # run on) and how many of them share one reply's matrix products. On CTranslate2 one is
    # fastest for a 135M model (two threads on one reply took 1.30x the time of one on 2 cores:
    # results/records/bench/ct2_threads_per_reply.md) and the rest serve other prompts of a
    # batch, one prompt per core; llama.cpp's threads do speed up one reply.
    quantization: Quantization = "int8"
    threads: int = Field(0, ge=0)
    threads_per_reply: int = Field(1, ge=1)
    n_gpu_layers: int = Field(0, ge=-1, description="llamacpp: layers offloaded to the GPU "
                              "(-1: all; needs llama-cpp-python built with CUDA)")
    context_tokens: int = Field(4096, ge=256, le=131072, description="llamacpp: the key/value "
                                "cache's length, prompt plus reply")
    # openai backend
    base_url: str | None = None
    api_key_env: str | None = Field(None, description="name of the env var holding the key")
    timeout_s: float = Field(60.0, gt=0.0)
    retries: int = Field(2, ge=0)
    max_concurrency: int = Field(8, ge=1)
    # images sent to a VLM are resized so their longest side is at most this (0 = as is)
    image_max_side: int = Field(640, ge=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL such as http://127.0.0.1:8000/v1")
        return url

    @field_validator("subfolder")
    @classmethod
    def _inside(cls, folder: str | None) -> str | None:
        if folder and ".." in folder.split("/"):
            raise ValueError("must stay inside the repository (no '..')")
        return folder

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, name: str | None) -> str | None:
        if name is not None and not _ENVNAME_RE.match(name):
            raise ValueError("must be the name of an environment variable, e.g. MY_VLM_KEY")
        return name

    @model_validator(mode="after")
    def _endpoint(self) -> ModelConfig:
        if self.backend == "openai" and not self.base_url:
            raise ValueError("base_url is required for backend 'openai'")
        check_engine_quantization(self.backend, self.quantization)
        return self


class CameraConfig(StrictModel):
    """Pinhole intrinsics of visual ego-motion, colour bearings and grounding; unset values
    fall back to a guess from hfov."""

    fx: float | None = Field(None, gt=0.0)
    fy: float | None = Field(None, gt=0.0)
    cx: float | None = None
    cy: float | None = None
    hfov_deg: float = Field(70.0, gt=1.0, lt=179.0, description="used when fx is unset")
    width: int | None = Field(None, ge=1, description="image width fx and cx are for (a "
                              "CameraInfo's); they are scaled to the image read")
    height: int | None = Field(None, ge=1, description="image height fy and cy are for")


class TfConfig(StrictModel):
    """Where the camera is when poses come from the tf tree (a ``tf2_msgs/TFMessage`` pose
    topic in a bag, or the frame buffer's ``pose_source: tf``): recordings/transforms.py."""

    odom_frame: str = Field("odom", min_length=1, description="the fixed frame poses are "
                            "read in (the chain's top)")
    camera_frame: str = Field("", description="the camera's frame (the chain's end); empty: "
                              "the frame_id of the image messages' headers")
    camera_axes: Literal["optical", "body"] = Field(
        "optical", description="axes of camera_frame: optical (REP 103: z forward, x right, "
        "y down; what image headers name) or body (x forward, y left, z up: a camera_link)")


class GroundingConfig(StrictModel):
    """Objects the VLM boxes in key frames, placed by bearing (core/grounding.py): kept in the
    frame records, never written into the frame lines. The pixel bounds are Qwen2.5-VL's
    processor's (its preprocessor_config.json); the transformers backend uses its own."""

    mode: Literal["off", "request", "reply"] = Field(
        "off", description="off; request: one grounding call per key frame (the frame alone); "
        "reply: the boxes asked for in the perception call itself")
    max_objects: int = Field(8, ge=1, le=32, description="objects kept per key frame (the "
                             "memory keeps 32); streaming asks for this many salient ones")
    factor: int = Field(28, ge=1, description="the processor's patch x merge size")
    min_pixels: int = Field(3136, ge=1, description="the processor's lower pixel bound")
    max_pixels: int = Field(12845056, ge=1, description="the processor's upper pixel bound")

    @model_validator(mode="after")
    def _bounds(self) -> GroundingConfig:
        if self.min_pixels > self.max_pixels:
            raise ValueError("min_pixels must not exceed max_pixels")
        return self


class PerceptionConfig(StrictModel):
    # vlm: the paper's question-conditioned VLM; geometric: actions from ego-motion only.
    backend: Literal["vlm", "geometric"] = "vlm"
    vlm: ModelConfig | None = None
    camera: CameraConfig = CameraConfig()
    tf: TfConfig = TfConfig()
    grounding: GroundingConfig = GroundingConfig()
    report_motion: bool = Field(True, description="write measured motion beside the VLM's action")
    # timed: on the robot route (measured motion reported) each frame line states its age and
    # the whole planar motion since the previous key frame; paper: one action a frame, no ages
    # (the layout the shipped reasoner was trained on). The benchmark route is the paper's
    # either way.
    frame_layout: Literal["timed", "paper"] = Field(
        "timed", description="robot-route frame lines: ages and whole motions (timed), or one "
        "action a frame (paper)")
    # one rule for the robot and for datasets built from bags (core/odometry.py): a key frame
    # takes the odometry pose nearest in time within this, else visual ego-motion is used
    odom_tolerance_sec: float = Field(ODOM_TOLERANCE_SEC, ge=0.0, le=10.0,
                                      description="max seconds between a key frame and its "
                                      "odometry pose")
    # robust: numbering read leniently, the action matched to the vocabulary (robots);
    # official: the official split_points reading (the paper route and benchmark imports)
    reply_reading: Literal["robust", "official"] = "robust"
    # per_query: the paper (every VLM call sees the question); streaming: key frames are
    # described question-agnostically as they arrive, a query mostly reads stored descriptions
    mode: Literal["per_query", "streaming"] = "per_query"
    concurrency: int = Field(
        0, ge=0, description="VLM calls of one query sent together (0: all; 1: one at a time)"
    )
    streaming_queue: int = Field(
        8, ge=1, description="key frames waiting for a background description before the oldest "
        "is dropped (streaming mode)"
    )

    @model_validator(mode="after")
    def _needs_vlm(self) -> PerceptionConfig:
        if self.backend == "vlm" and self.vlm is None:
            raise ValueError("perception.vlm is required when perception.backend is 'vlm'")
        return self


class ReasoningConfig(StrictModel):
    model: ModelConfig
    # a second LM for the texts a memory writes (frames of hours, then where the named objects
    # are now): a 135M reader trained on both kinds of text forgets the short clips'
    # conclusions (docs/memory.md), so each kind gets its own
    memory_model: str | None = Field(
        None, min_length=1, description="the model that reads memory texts (those with a "
        "places block), run with reasoning.model's settings and loaded where memory.enabled; "
        "unset (null): reasoning.model reads them too")
    answer_mode: Literal["tag", "official"] = "tag"


class CacheConfig(StrictModel):
    """VLM replies per call (key frame, or key-frame pair): memory LRU in front of disk."""

    enabled: bool = Field(True, description="cache replies (false: none, except the memory LRU "
                          "that streaming perception keeps its descriptions in)")
    dir: str = "~/.cache/embodied_r/perception"
    max_mb: float = Field(512.0, gt=0.0, description="disk bound; least recently used go first")
    memory_mb: float = Field(32.0, gt=0.0, description="memory bound of the LRU")


class MemoryConfig(StrictModel):
    """Long-horizon spatial memory: every key frame, described, kept on disk for hours
    (``embodied_r_ros/memory``, docs/memory.md)."""

    enabled: bool = Field(False, description="keep key frames in the memory and answer from it")
    # sqlite: one file on the robot (the default); postgres: many robots writing to one server
    backend: Literal["sqlite", "postgres"] = "sqlite"
    path: str = Field("~/.local/share/embodied_r/memory.sqlite3",
                      description="the SQLite file (backend sqlite)")
    dsn: str | None = Field(None, description="libpq connection string of the server (backend "
                            "postgres); the password comes from PGPASSWORD or ~/.pgpass")
    robot: str = Field("robot", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,63}$",
                       description="the name the rows are keyed by (one per robot of a fleet)")
    max_mb: float = Field(1024.0, gt=0.0, description="bound: thumbnails are pruned first, "
                          "then the oldest rows (sqlite: the file; postgres: each robot's rows)")
    thumbnail_side: int = Field(96, ge=0, le=1024, description="longer side of the thumbnail "
                                "kept per key frame, pixels; 0 keeps none")
    thumbnail_quality: int = Field(70, ge=10, le=100, description="JPEG quality of thumbnails")
    # auto: similarity search where the pinned embedding model is installed, full-text search
    # alone otherwise; required: refuse to start without it
    embedder: Literal["auto", "off", "required"] = "auto"
    budget: int = Field(0, ge=0, description="key frames a question selects from the memory; "
                        "0: keyframes.max_frames")
    latest: int = Field(LATEST_FRAMES, ge=1, description="the newest key frames every "
                        "selection includes")
    share_placements: bool = Field(False, description="read every robot's placed objects of "
                                   "the store, not only this robot's (the fleet's poses must "
                                   "be in one shared world frame, e.g. a common map)")

    @model_validator(mode="after")
    def _server(self) -> MemoryConfig:
        if self.backend == "postgres" and not self.dsn:
            raise ValueError("memory.dsn is required when memory.backend is 'postgres'")
        if self.dsn and re.search(r"(?i)password\s*=|://[^/@]*:[^/@]*@", self.dsn):
            raise ValueError("memory.dsn must not hold a password: set PGPASSWORD or use "
                             "~/.pgpass")
        return self


class ViewerConfig(StrictModel):
    """Foxglove's WebSocket protocol served by the all-in-one process itself (``foxglove-sdk``,
    docs/ros.md "Watching the robot"): off unless enabled, on loopback unless told otherwise."""

    enabled: bool = Field(False, description="serve the viewer channels and the query service")
    host: str = Field("127.0.0.1", min_length=1, description="address to listen on; another "
                      "than loopback lets anyone who reaches the port ask the robot questions")
    port: int = Field(8765, ge=0, le=65535, description="TCP port (0: any free port)")
    tls_cert: str | None = Field(None, description="PEM certificate file: serve wss:// (it "
                                 "encrypts; it does not authenticate)")
    tls_key: str | None = Field(None, description="PEM PKCS#8 key file of tls_cert")

    @model_validator(mode="after")
    def _tls_pair(self) -> ViewerConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("viewer.tls_cert and viewer.tls_key go together")
        return self


class Config(StrictModel):
    """The whole pipeline: key frames -> perception -> reasoning."""

    name: str = "custom"
    description: str = ""
    keyframes: KeyframeConfig = KeyframeConfig()
    perception: PerceptionConfig
    reasoning: ReasoningConfig
    cache: CacheConfig = CacheConfig()
    memory: MemoryConfig = MemoryConfig()
    viewer: ViewerConfig = ViewerConfig()
    prompts: str | None = Field(
        None, description="prompt templates file (default config/prompts.yaml)"
    )

    def memory_reader(self) -> ModelConfig | None:
        """The memory reader's settings (``reasoning.model``'s, naming
        ``reasoning.memory_model``), or ``None`` where there is none to load: no reader
        named, or the memory off (nothing else writes the texts it reads)."""
        reasoning = self.reasoning
        if reasoning.memory_model is None or not self.memory.enabled:
            return None
        return reasoning.model.model_copy(update={"model": reasoning.memory_model})
