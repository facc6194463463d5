"""ament_python package that also installs with plain ``pip install -e .`` (no ROS needed)."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "embodied_r_ros"

setup(
    name=PACKAGE,
    version="0.1.0",
    description="Embodied-R spatial reasoning for ROS 2 and its GRPO trainer",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    python_requires=">=3.10,<3.14",
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
    ],
    install_requires=[
        "numpy>=1.26",
        "opencv-python-headless>=4.8",
        "pyyaml>=6",
        "pydantic>=2.6",
        "tqdm>=4.60",
        "pillow>=10",
    ],
    extras_require={
        "ml": ["torch>=2.4", "transformers>=4.51", "accelerate>=1.0", "tokenizers>=0.20"],
        "bags": ["rosbags>=0.10", "rosbags-image>=0.9"],
        "vllm": ["vllm>=0.22,<0.32"],
    },
    entry_points={
        "console_scripts": [
            "embodied-r = embodied_r_ros.cli:main",
            "embodied_r = embodied_r_ros.__main__:main",
        ],
    },
    zip_safe=True,
)
