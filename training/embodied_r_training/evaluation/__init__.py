"""Evaluating a trained reasoner: the run, its scoring and its report."""
