"""Offline training of the reasoning LM: datasets from bags and benchmarks, GRPO, SFT, evaluation.

Installed as ``embodied_r_training`` (from the ``training/`` folder of the repository).
"""
