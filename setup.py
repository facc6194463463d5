"""ament_python package that also installs with plain ``pip install -e .`` (no ROS needed)."""

import platform
from glob import glob

from setuptools import Extension, find_packages, setup

PACKAGE = "embodied_r_ros"

# Optional C speed-up of descriptor matching; the core falls back to NumPy without it.
HAMMING = Extension(
    f"{PACKAGE}.core._hamming",
    sources=[f"{PACKAGE}/core/_hamming.c"],
    extra_compile_args=[
        "-O3",
        *(["-mpopcnt"] if platform.machine() in ("x86_64", "AMD64") else []),
    ],
    optional=True,
)

setup(
    name=PACKAGE,
    version="0.1.0",
    description="Embodied-R spatial reasoning for ROS 2 and its GRPO trainer",
    packages=[
        *find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
        # training/embodied_r_training: the trainer, beside the robot's package
        *find_packages(where="training", include=["embodied_r_training", "embodied_r_training.*"]),
    ],
    package_dir={"embodied_r_training": "training/embodied_r_training"},
    package_data={
        # config/ is reached from inside the package (embodied_r_ros/config is a link to it), so
        # profiles, prompts and the Fast DDS profile travel with every install: wheel, colcon, -e
        PACKAGE: ["config/*.yaml", "config/*.xml", "config/*.json", "config/profiles/*.yaml",
                  # the shipped LoRA adapter of the offline model smollm2-135m-embodied-r
                  "models/*/*.json", "models/*/*.safetensors", "models/*/*.md"],
        "embodied_r_training": ["configs/*.yaml", "accelerate/*.yaml", "README.md"],
    },
    python_requires=">=3.10,<3.14",
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config",
         glob("config/*.yaml") + glob("config/*.xml") + glob("config/*.json")),
        (f"share/{PACKAGE}/config/profiles", glob("config/profiles/*.yaml")),
    ],
    install_requires=[
        "numpy>=1.26",
        "opencv-python-headless>=4.8",
        "pyyaml>=6",
        "pydantic>=2.6",
        "tqdm>=4.60",
        "pillow>=10",
        "openai>=2",  # the client of OpenAI-compatible VLM endpoints (vllm serve, ...)
        # camera frames and bags: the frame buffer converts every image with rosbags-image
        "rosbags>=0.10",
        "rosbags-image>=0.9",
    ],
    extras_require={
        "ml": [
            "torch>=2.4",
            "transformers>=5,<6",  # the text decoder reads the checkpoint layout 5 writes
            "accelerate>=1.0",
            "tokenizers>=0.20",
            "gguf>=0.17",  # smollm2-135m is converted from a GGUF file; llama.cpp's GGUF writer
            "peft>=0.21",  # merges the shipped adapter of smollm2-135m-embodied-r
            "ctranslate2>=4.5",  # the fast CPU engine when llama.cpp is not installed
            "safetensors>=0.4",  # adapters are read and written directly
            "filelock>=3.12",  # one build of an offline model at a time
            "huggingface_hub>=0.30",  # a released checkpoint's folder is fetched alone
        ],
        # the offline profile's reasoning engine; compiles on install (see the Makefile's flags)
        "llamacpp": ["llama-cpp-python>=0.3.16"],
        "train": [
            "trl>=1.16,<1.17",  # grpo.py is tested against 1.16 (reward kwargs, log_metric)
            "datasets>=5",
            "peft>=0.21",
            "tensorboard>=2.20",
            "matplotlib>=3.9",
            "pandas>=2",
        ],
        "vllm": ["vllm>=0.22,<0.32"],
        # embodied-r memory plot and export
        "memory": ["matplotlib>=3.9", "mcap>=1.6"],
        # memory.backend: postgres (libpq comes in the binary wheel)
        "postgres": ["psycopg[binary]>=3.2"],
        # viewer.enabled: Foxglove's WebSocket protocol served by the all-in-one process
        "viewer": ["foxglove-sdk>=0.30,<0.31"],
    },
    entry_points={
        "console_scripts": [
            "embodied-r = embodied_r_ros.cli:main",
            # ROS 2 executables (ros2 run embodied_r_ros <name>), installed under lib/ by setup.cfg
            "embodied_r = embodied_r_ros.__main__:main",
            "frame_buffer = embodied_r_ros.nodes.frame_buffer:main",
            "perception_node = embodied_r_ros.nodes.perception_node:main",
            "reasoning_node = embodied_r_ros.nodes.reasoning_node:main",
            "query_server = embodied_r_ros.nodes.query_server:main",
            "bag_player = embodied_r_ros.ros_player:main",
            "embodied-r-train = embodied_r_training.cli:main",
        ],
    },
    ext_modules=[HAMMING],
    zip_safe=False,
)
