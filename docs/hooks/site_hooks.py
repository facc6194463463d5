"""MkDocs hooks (``hooks:`` in mkdocs.yml): one source for the README and the docs, tables from
the code, and links that work both on GitHub and on the built site.

- The README is the site's home page (``index.md`` is made from it at build time).
- The files the pages link to outside ``docs/`` (results, model cards, shipped configs, the
  lab's README) are carried into the site under their repository path, and a link written for
  GitHub (``../results/bench/x.json`` from ``docs/``, ``docs/x.md`` from the README) is
  rewritten to the site's copy. A link to a file the site does not carry stays as written, so
  ``mkdocs build --strict`` reports it.
- A region between ``<!-- generated: NAME -->`` and ``<!-- end generated -->`` is replaced by
  the table ``NAME`` generated from the code (``reference_tables.py``); on GitHub the text
  between the markers says where the table comes from.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page
from reference_tables import config_reference, node_parameter_tables

#: repository folders whose files of these kinds the site carries (what pages may link to)
CARRIED: dict[str, tuple[str, ...]] = {
    "results": (".md", ".json", ".png", ".csv"),
    "lab": (".md",),
    "embodied_r_ros/models": (".md", ".png"),
    "config/profiles": (".yaml",),
    "training/embodied_r_training/configs": (".yaml",),
}
GENERATORS: dict[str, Callable[[], str]] = {
    "node-parameters": node_parameter_tables,
    "config-reference": config_reference,
}
GENERATED = re.compile(r"<!-- generated: ([\w-]+) -->.*?<!-- end generated -->", re.S)
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
HOME = "index.md"
README = "README.md"


def _repo(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def _docs_prefix(config: MkDocsConfig) -> str:
    return Path(config.docs_dir).resolve().relative_to(_repo(config)).as_posix() + "/"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the home page (the README) and the repository files the pages may link to."""
    repo = _repo(config)
    files.append(File.generated(config, HOME, abs_src_path=str(repo / README)))
    for folder, suffixes in CARRIED.items():
        for path in sorted((repo / folder).rglob("*")):
            if path.is_file() and path.suffix in suffixes:
                src_uri = path.relative_to(repo).as_posix()
                files.append(File.generated(config, src_uri, abs_src_path=str(path),
                                            inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def _repo_path(page: Page, config: MkDocsConfig) -> str:
    """Where the page's source lives in the repository."""
    if page.file.src_uri == HOME:
        return README
    if page.file.abs_src_path and Path(page.file.abs_src_path).is_relative_to(_repo(config)):
        return Path(page.file.abs_src_path).resolve().relative_to(_repo(config)).as_posix()
    return _docs_prefix(config) + page.file.src_uri


def site_link(target: str, page_repo_path: str, page_src_uri: str, docs_prefix: str) -> str:
    """``target`` as written in the repository (relative to the page's own file) -> the same
    file's link on the site (relative to the page's place in the site)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
        return target  # a URL, an anchor on the page, an absolute path
    path, hash_, anchor = target.partition("#")
    in_repo = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo_path), path))
    if in_repo.startswith("../"):
        return target  # outside the repository: left for mkdocs to report
    in_site = in_repo.removeprefix(docs_prefix) if in_repo.startswith(docs_prefix) else in_repo
    in_site = HOME if in_site == README else in_site
    rel = posixpath.relpath(in_site, posixpath.dirname(page_src_uri) or ".")
    return rel + hash_ + anchor


def _outside_fences(markdown: str, edit: Callable[[str], str]) -> str:
    """``edit`` applied to the text between fenced code blocks only."""
    out, last = [], 0
    for fence in FENCE.finditer(markdown):
        out += [edit(markdown[last:fence.start()]), fence.group(0)]
        last = fence.end()
    return "".join([*out, edit(markdown[last:])])


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    def generate(match: re.Match[str]) -> str:
        name = match[1]
        if name not in GENERATORS:
            raise KeyError(f"{page.file.src_uri}: no generator named {name!r}")
        return GENERATORS[name]()

    repo_path = _repo_path(page, config)
    prefix = _docs_prefix(config)

    def relink(text: str) -> str:
        return LINK.sub(lambda m: m[1] + site_link(m[2], repo_path, page.file.src_uri, prefix)
                        + m[3], text)

    return _outside_fences(GENERATED.sub(generate, markdown), relink)
