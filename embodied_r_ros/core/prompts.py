"""The wording of every prompt, as data: ``config/prompts.yaml`` or a file the user names.

A released checkpoint was trained with some exact text; running other wording must not need a
code change. A :class:`PromptSet` is validated once (every template present, only its own
placeholders), and its :attr:`~PromptSet.version` is derived from the text itself, so caches and
datasets keyed by it never mix replies to different wording.
"""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from embodied_r_ros.core.actions import ACTIONS
from embodied_r_ros.core.config import CONFIG_DIR, ConfigError

DEFAULT_PROMPTS = CONFIG_DIR / "prompts.yaml"

#: each template and the placeholders it must use
PLACEHOLDERS: dict[str, frozenset[str]] = {
    "system": frozenset(),
    "lm_instruction": frozenset(),
    "preamble": frozenset(),
    "first_frame": frozenset({"question"}),
    "pair": frozenset({"question", "actions"}),
    "first_frame_streaming": frozenset(),
    "pair_streaming": frozenset({"actions"}),
    "reference_system": frozenset(),
    "reference_user": frozenset({"question", "think"}),
}
#: the grounding templates (:mod:`embodied_r_ros.core.grounding`): optional in a prompt file
#: (where one leaves them out, ``config/prompts.yaml``'s are used) and outside
#: :attr:`PromptSet.version`, so the versions, caches and datasets of the other templates stay
#: valid whatever they say; a grounding call is cached by its own text
GROUNDING_PLACEHOLDERS: dict[str, frozenset[str]] = {
    "grounding": frozenset({"question"}),
    "grounding_streaming": frozenset({"max_objects"}),
    "grounding_reply": frozenset(),
    "grounding_reply_streaming": frozenset({"max_objects"}),
}


@dataclass(frozen=True)
class PromptSet:
    """The templates of one prompt file (field names as in ``config/prompts.yaml``)."""

    name: str
    system: str
    lm_instruction: str
    preamble: str
    first_frame: str
    pair: str
    first_frame_streaming: str
    pair_streaming: str
    reference_system: str
    reference_user: str
    grounding: str = ""
    grounding_streaming: str = ""
    grounding_reply: str = ""
    grounding_reply_streaming: str = ""

    @property
    def version(self) -> str:
        """``<name>-<12 hex digits of the text>``: changes whenever any wording but the
        grounding templates' does (:attr:`grounding_version` covers those)."""
        text = {k: v for k, v in asdict(self).items() if k not in GROUNDING_PLACEHOLDERS}
        return f"{self.name}-{_hex(text)}"

    @property
    def grounding_version(self) -> str:
        """12 hex digits of the grounding templates' text."""
        return _hex({k: getattr(self, k) for k in GROUNDING_PLACEHOLDERS})

    # -- rendering ---------------------------------------------------------------------------

    def first_frame_prompt(self, question_block: str | None) -> str:
        """Frame 0's instruction; ``None``: the question-agnostic (streaming) one."""
        if question_block is None:
            return self.first_frame_streaming
        return self.first_frame.format(question=question_block)

    def pair_prompt(self, question_block: str | None) -> str:
        actions = ", ".join(ACTIONS)
        if question_block is None:
            return self.pair_streaming.format(actions=actions)
        return self.pair.format(question=question_block, actions=actions)

    def reference_prompt(self, question_block: str, think: str) -> str:
        return self.reference_user.format(question=question_block.strip(), think=think.strip())

    def grounding_prompt(self, question_block: str | None, max_objects: int) -> str:
        """A grounding call's instruction: the question's objects, or (``None``: streaming)
        the salient ones, at most ``max_objects``."""
        if question_block is None:
            return self.grounding_streaming.format(max_objects=max_objects)
        return self.grounding.format(question=question_block)

    def grounding_reply_prompt(self, streaming: bool, max_objects: int) -> str:
        """What a perception call adds to ask for boxes in its own reply."""
        if streaming:
            return self.grounding_reply_streaming.format(max_objects=max_objects)
        return self.grounding_reply.format()


def _hex(data: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def _fields(template: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:  # an unmatched brace
        raise ConfigError(f"bad placeholder: {exc}") from None


def _read(file: Path, seen: tuple[Path, ...] = ()) -> dict[str, object]:
    """The templates of ``file``, over those of the file its ``base`` names (relative to it):
    a file holding one checkpoint's system prompt keeps every other template of its base."""
    try:
        data = yaml.safe_load(file.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read prompts {file}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"prompts {file} is not valid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise ConfigError(f"prompts {file} must be a mapping of template names to text")
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise ConfigError(f"prompts {file}: 'base' must name another prompts file")
    parent = (file.parent / base).expanduser().resolve()
    if parent in seen:
        raise ConfigError(f"prompts {file}: 'base' cycles through {parent}")
    return {**_read(parent, (*seen, parent)), **data}


def load_prompts(path: str | Path | None = None) -> PromptSet:
    """The prompt set in ``path`` (default: ``config/prompts.yaml``), validated."""
    file = Path(path).expanduser() if path else DEFAULT_PROMPTS
    data = _read(file, (file.resolve(),))
    unknown = sorted(set(data) - set(PLACEHOLDERS) - set(GROUNDING_PLACEHOLDERS) - {"name"})
    if unknown:
        raise ConfigError(f"prompts {file}: unknown template '{unknown[0]}'")
    values: dict[str, str] = {"name": str(data.get("name") or file.stem)}
    if file != DEFAULT_PROMPTS:
        missing = [key for key in GROUNDING_PLACEHOLDERS if key not in data]
        data = {**data, **{key: getattr(default_prompts(), key) for key in missing}}
    for key, wanted in {**PLACEHOLDERS, **GROUNDING_PLACEHOLDERS}.items():
        text = data.get(key)
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"prompts {file}: template '{key}' is missing or empty")
        try:
            found = _fields(text)
        except ConfigError as exc:
            raise ConfigError(f"prompts {file}: template '{key}': {exc}") from None
        if found != wanted:
            expected = ", ".join(f"{{{w}}}" for w in sorted(wanted)) or "none"
            raise ConfigError(
                f"prompts {file}: template '{key}' must use the placeholders {expected}, "
                f"found {', '.join(f'{{{f}}}' for f in sorted(found)) or 'none'}"
            )
        values[key] = text
    return PromptSet(**values)


@lru_cache(maxsize=8)
def _cached(path: str) -> PromptSet:
    return load_prompts(path or None)


def prompts_from(path: str | None) -> PromptSet:
    """:func:`load_prompts`, read once per file (the text is immutable data)."""
    return _cached(str(Path(path).expanduser().resolve()) if path else "")


def default_prompts() -> PromptSet:
    return prompts_from(None)
