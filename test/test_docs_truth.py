"""What the README and the docs say is true of the code: the profile table against the shipped
profiles (the table is parsed from the README, its one place), every file they link to exists,
every headline figure links to the file that holds it, the results index regenerates its files
with today's code, the profiles' comments carry no measurements, the memory reader's origin
is the one its card states, and no page tells the project's own history or reads like a lab
notebook."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel

from embodied_r_ros.core.config import Config
from embodied_r_ros.core.profiles import available_profiles, load_config

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
RESULTS_README = REPO / "results" / "README.md"
LAB_README = REPO / "lab" / "README.md"
PROFILES = sorted((REPO / "config" / "profiles").glob("*.yaml"))
MODEL_CARDS = sorted((REPO / "embodied_r_ros" / "models").glob("*/*.md"))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
MODEL_ON = re.compile(r"^`([^`]+)` on `([^`]+)`")
#: a phrase a profile-table cell may use -> the model setting it claims
CLAIMS: dict[str, tuple[str, Any]] = {
    "bf16": ("dtype", "bfloat16"),
    "CUDA": ("device", "cuda"),
    "float16 GGUF": ("quantization", "float16"),
}


def config_key_pattern(*schemas: type[BaseModel]) -> re.Pattern[str]:
    """A code span naming a setting (``memory.max_mb``, ``sft.max_steps=140``) of a section
    of one of ``schemas``: every section, so that a new one is checked from the start."""
    sections = sorted({name for schema in schemas for name, field in schema.model_fields.items()
                       if _models_in(field.annotation)})
    return re.compile(rf"`((?:{'|'.join(sections)})\.[\w.]+)(?:[:=][^`]*)?`")
#: a code span naming a file of this repository: `core/...` is short for `embodied_r_ros/core/...`
REPO_PATH = re.compile(r"`((?:embodied_r_ros|embodied_r_interfaces|training|config|core|test|bench|"
                       r"tools|launch|results|docs|lab)/[\w./-]*[\w-])`")
FILE_SUFFIXES = {"py", "json", "jsonl", "md", "png", "yaml"}
HISTORY = re.compile(r"\bissues? \d+|\bissue-\d+|\bstop \d+|\b(this|next|last) session\b|"
                     r"\bdigest\b|\brun \d+\b", re.I)
#: a lab notebook's words: reports of runs live beside their files in results/ and in
#: lab/README.md, and the reference pages say what the software does and measures now
NOTEBOOK = re.compile(r"\bthe earlier reasoner\b|\brehearsed\b|\b(we|was|were) tried\b|"
                      r"\brun \d+\b|\bwe\b|\bthis round\b|\b(before|after) the change\b|"
                      r"\bwas measured before\b|\bthe current one\b|\bwas analysed\b|"
                      r"\b(has|have|had) not yet\b|\bwas lent\b|\bfound that\b|\bnow passes\b|"
                      r"\bwas not run\b|\bwas available\b|\bwhile it was built\b|\bturned out\b|"
                      r"\bpreviously\b|\boriginally\b|\bat first\b|\b(was|were) measured with\b",
                      re.I)
#: the memory reader's model card says it grew from an earlier adapter of the reasoner's recipe;
#: a page that calls it the shipped reasoner fine-tuned states its origin wrongly
MEMORY_READER_CARD = (REPO / "embodied_r_ros" / "models" / "smollm2-135m-embodied-r-memory"
                      / "README.md")
FROM_THE_SHIPPED_ADAPTER = re.compile(r"\b(the\s+shipped\s+reasoner's\s+adapter|that\s+reasoner|"
                                      r"that\s+adapter)\s+fine-tuned\b", re.I)
#: a measured figure in a comment: a share, a time, a count of tokens, a percentile
FIGURE = re.compile(r"\d\s*%|\d\s*(ms|s|seconds?|min|minutes?|hours?|tokens?)\b|"
                    r"\b(p50|p99|median)\b", re.I)
#: a command the results index regenerates a file with: a benchmark script, a module, a CLI
COMMAND = re.compile(r"`(?:\.venv/bin/python |\.venv/bin/)?(bench/\w+\.py|"
                     r"python -m \w+(?:\.\w+)*(?=[\s`])|embodied-r(?:-train)? [\w-]+)")


def section(markdown: str, title: str) -> str:
    """The text under the heading ``title``, up to the next heading of its level or above."""
    match = re.search(rf"^(#+) {re.escape(title)}$", markdown, re.M)
    assert match, f"no section {title!r}"
    body = markdown[match.end():]
    end = re.search(rf"^#{{1,{len(match[1])}}} ", body, re.M)
    return body[: end.start()] if end else body


def table(markdown: str) -> list[dict[str, str]]:
    """The first markdown table's rows, as header -> cell."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
            for line in lines[2:]]


def profile_rows() -> dict[str, dict[str, str]]:
    rows = table(section(README.read_text(), "Profiles"))
    return {re.fullmatch(r"`([\w-]+)`", row["profile"])[1]: row for row in rows}


def test_the_profile_table_names_every_shipped_profile() -> None:
    assert sorted(profile_rows()) == available_profiles()


def _check_model(cell: str, model: Any) -> None:
    match = MODEL_ON.match(cell)
    assert match, f"write the model as `MODEL` on `BACKEND`: {cell}"
    assert (model.model, model.backend) == (match[1], match[2]), cell
    for phrase, (attribute, value) in CLAIMS.items():
        if phrase in cell:
            assert getattr(model, attribute) == value, (phrase, cell)


@pytest.mark.parametrize("name", available_profiles())
def test_the_profile_table_says_what_the_profile_loads(name: str) -> None:
    row = profile_rows()[name]
    config: Config = load_config(profile=name)
    if row["perception"].startswith("`geometric`"):
        assert config.perception.backend == "geometric"
    else:
        assert config.perception.backend == "vlm"
        _check_model(row["perception"], config.perception.vlm)
    _check_model(row["reasoning"], config.reasoning.model)
    memory = re.search(r"memory texts: `([\w.-]+)`", row["reasoning"])
    assert (memory[1] if memory else None) == config.reasoning.memory_model, row["reasoning"]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _is_key(model: type[BaseModel], parts: list[str]) -> bool:
    field = model.model_fields.get(parts[0])
    if field is None:
        return False
    return len(parts) == 1 or any(_is_key(m, parts[1:]) for m in _models_in(field.annotation))


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_every_configuration_key_the_docs_name_exists(page: Path) -> None:
    from embodied_r_training.recipe import TrainConfig

    keys = [k for k in config_key_pattern(Config, TrainConfig).findall(page.read_text())
            if k.rsplit(".", 1)[1] not in FILE_SUFFIXES]
    for key in keys:
        parts = key.split(".")
        schema = Config if parts[0] in Config.model_fields else TrainConfig
        assert _is_key(schema, parts), f"{page.name} names {key}, which {schema.__name__} lacks"


@pytest.mark.parametrize("page", [README, *DOCS, RESULTS_README, LAB_README],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_repository_path_the_docs_name_exists(page: Path) -> None:
    for path in REPO_PATH.findall(page.read_text()):
        full = REPO / ("embodied_r_ros/" + path if path.startswith("core/") else path)
        assert full.exists(), f"{page.name} names {path}, which does not exist"


def _links(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)  # not in code blocks
    return [link for link in LINK.findall(text)
            if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", link)]


@pytest.mark.parametrize("page", [README, *DOCS, *MODEL_CARDS, RESULTS_README, LAB_README],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_linked_file_exists(page: Path) -> None:
    for link in _links(page):
        target = (page.parent / link.partition("#")[0]).resolve()
        assert target.exists(), f"{page.relative_to(REPO)} links to a missing {link}"


def test_every_headline_figure_links_to_its_results_file() -> None:
    bullets = re.findall(r"^- (.*?)(?=^- |\Z)", section(README.read_text(), "Headline figures"),
                         re.S | re.M)
    assert len(bullets) >= 3
    for bullet in bullets:
        sources = [link for link in LINK.findall(bullet)
                   if link.startswith(("results/", "embodied_r_ros/models/"))]
        assert sources, f"a headline figure without its results file: {bullet}"
        assert all((REPO / link).is_file() for link in sources), sources


def _generated_references() -> str:
    """The tables the docs build generates from the code (node parameters, config keys)."""
    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    try:
        from reference_tables import config_reference, node_parameter_tables
    finally:
        sys.path.pop(0)
    try:
        return config_reference() + node_parameter_tables()
    except ImportError:  # the node tables need ROS; the config keys do not
        return config_reference()


def _hits(pattern: re.Pattern[str], texts: dict[str, str]) -> dict[str, list[str]]:
    found = {name: sorted({m.group(0) for m in pattern.finditer(text)})
             for name, text in texts.items()}
    return {name: hits for name, hits in found.items() if hits}


def test_no_page_tells_the_projects_history_or_cites_outside_documents() -> None:
    pages = [README, *DOCS, *MODEL_CARDS, RESULTS_README]
    texts = {p.relative_to(REPO).as_posix(): p.read_text() for p in pages}
    texts["generated reference tables"] = _generated_references()
    assert not _hits(HISTORY, texts)


def test_no_reference_page_reads_like_a_lab_notebook() -> None:
    """The pages of the site and the results index are a reference; a model card records how
    its model was trained, so it is held to the history rule above only."""
    texts = {p.relative_to(REPO).as_posix(): p.read_text()
             for p in [README, *DOCS, RESULTS_README]}
    texts["generated reference tables"] = _generated_references()
    assert not _hits(NOTEBOOK, texts)


def test_no_page_says_the_memory_reader_grew_from_the_shipped_adapter() -> None:
    card = " ".join(MEMORY_READER_CARD.read_text().split())
    assert "the adapter `smollm2-135m-embodied-r` had before its recipe was rerun" in card
    texts = {p.relative_to(REPO).as_posix(): p.read_text() for p in [README, *DOCS]}
    assert not _hits(FROM_THE_SHIPPED_ADAPTER, texts)


def test_the_profiles_comments_carry_no_measured_figures() -> None:
    """A profile says what it loads; what that measures lives in the results and the docs."""
    comments = {p.name: "\n".join(line.partition("#")[2] for line in p.read_text().splitlines()
                                   if "#" in line) for p in PROFILES}
    assert not _hits(FIGURE, comments)


def _subcommands(parser: Any) -> set[str]:
    import argparse

    return {name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices}


def test_the_results_index_regenerates_each_file_with_todays_code() -> None:
    """Every command the index gives exists in this checkout: a benchmark script, a module of
    the packages or the lab, a subcommand of the two command lines; none is an old commit's."""
    from embodied_r_ros.cli import build_parser as ros_parser
    from embodied_r_training.cli import build_parser as train_parser

    text = RESULTS_README.read_text()
    assert "git show" not in text, "a file only an old commit regenerates is a record"
    clis = {"embodied-r": _subcommands(ros_parser()),
            "embodied-r-train": _subcommands(train_parser())}
    commands = COMMAND.findall(text)
    assert len(commands) >= 10, commands
    for command in commands:
        if command.startswith("bench/"):
            assert (REPO / command).is_file(), command
        elif command.startswith("python -m "):
            module = command.removeprefix("python -m ").replace(".", "/")
            assert any((root / module).with_suffix(".py").is_file()
                       or (root / module / "__main__.py").is_file()
                       for root in (REPO, REPO / "training")), command
        else:
            cli, sub = command.split()
            assert sub in clis[cli], command
