"""Datasets: questions, key frames, perception text, rationales, splits and the files of a
built dataset."""
