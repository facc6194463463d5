"""A throwaway PostgreSQL server for tests and benchmarks, from Debian's ``postgresql``.

``initdb`` in a temporary folder, ``pg_ctl start`` listening on a Unix socket in that folder
only (no TCP port: nothing can reach it from outside, and no port can be taken already), then
``stop`` and the folder removed. ``initdb`` refuses to run as root, so as root the server runs
as the ``postgres`` user Debian's package creates.
"""

from __future__ import annotations

import glob
import importlib.util
import logging
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

log = logging.getLogger(__name__)

SERVER_USER = "postgres"
PORT = 5432


def bin_dir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are (``pg_config --bindir``, else the newest
    ``/usr/lib/postgresql/*/bin``); None where PostgreSQL is not installed."""
    candidates: list[str] = []
    if shutil.which("pg_config"):
        done = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True,
                              check=False)
        candidates.append(done.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    return None


def unavailable_reason() -> str | None:
    """Why a temporary server cannot start here (None: it can)."""
    if bin_dir() is None:
        return "PostgreSQL's initdb and pg_ctl are not installed (Debian: apt-get install " \
               "postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root and there is no '{SERVER_USER}' user to run the server as"
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed (requirements.txt)"
    return None


class TemporaryPostgres:
    """``with TemporaryPostgres() as pg: dsn = pg.create_database("t1")``."""

    def __init__(self, user: str = "er", options: str = "") -> None:
        self.user = user
        self.options = options
        self.dir: Path | None = None
        self._bin = bin_dir()

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self._bin is not None
        kwargs: dict[str, Any] = {}
        if os.geteuid() == 0:
            kwargs = {"user": SERVER_USER, "group": pwd.getpwnam(SERVER_USER).pw_gid,
                      "extra_groups": []}
        done = subprocess.run([str(self._bin / args[0]), *args[1:]], capture_output=True,
                              text=True, check=False, cwd=self.dir, **kwargs)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {(done.stderr or done.stdout).strip()}")
        return done

    def start(self) -> TemporaryPostgres:
        if reason := unavailable_reason():
            raise RuntimeError(reason)
        self.dir = Path(tempfile.mkdtemp(prefix="er-pg-"))
        if os.geteuid() == 0:
            entry = pwd.getpwnam(SERVER_USER)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        data = self.dir / "data"
        self._run("initdb", "-D", str(data), "-A", "trust", "-U", self.user, "-E", "UTF8")
        self._run("pg_ctl", "-D", str(data), "-l", str(self.dir / "log"), "-w", "-o",
                  f"-k {self.dir} -p {PORT} -c listen_addresses='' {self.options}", "start")
        log.info("temporary PostgreSQL running in %s", self.dir)
        return self

    def dsn(self, dbname: str = "postgres") -> str:
        assert self.dir is not None, "not started"
        return f"host={self.dir} port={PORT} user={self.user} dbname={dbname}"

    def create_database(self, name: str) -> str:
        """A new, empty database; returns its connection string."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.dsn(name)

    def stop(self) -> None:
        if self.dir is None:
            return
        try:
            if (self.dir / "data" / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> TemporaryPostgres:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
