"""The docs site builds with ``mkdocs build --strict``: a broken link or anchor, a page missing
from the navigation, or a generated table whose code fails to import fails the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ros_helpers import require_ros

REPO = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly_with_the_generated_tables(tmp_path: Path) -> None:
    require_ros()  # the node parameter tables are read from the node modules
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(REPO / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # the home page is the README, the reference tables were generated into their pages
    home = (site / "index.html").read_text()
    assert "Three recipes" in home and 'class="mermaid"' in home
    ros = (site / "ros" / "index.html").read_text()
    assert "<code>buffer_sec</code>" in ros and "<code>max_concurrent_queries</code>" in ros
    keys = (site / "config-reference" / "index.html").read_text()
    assert "<code>odom_tolerance_sec</code>" in keys and "<code>num_generations</code>" in keys
    # a results file a page links to travels with the site
    assert (site / "results" / "bench" / "keyframes.json").is_file()
