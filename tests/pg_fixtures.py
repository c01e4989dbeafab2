"""A real PostgreSQL server for the tests of PostgreSQL sources (issue 31), started once per test session.

``pgserver`` (a pip-installable PostgreSQL; docs/development.md, "PostgreSQL in the tests") runs the server from a temporary folder,
listening on a Unix socket there only (no TCP port: parallel test workers never collide), ready in about
4 s. The fixture :func:`pg_server` yields a :class:`PgServer`; tests that use it are skipped, with the
reason, only when the server cannot start (``.ci/run`` installs the dev extra, which has ``pgserver``).

The server trusts local logins by default; :meth:`PgServer.add_password_role` adds a role that must give
its password (``scram-sha-256``), so a wrong password really fails.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class PgServer:
    """A running test server: its admin URI (trusted) and socket folder."""

    admin_uri: str
    socket_dir: str
    data_dir: Path

    def execute(self, *statements: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_uri, autocommit=True) as con:
            for sql in statements:
                con.execute(sql)

    def uri(self, user: str, password: str | None = None, database: str = "postgres") -> str:
        auth = user if password is None else f"{user}:{password}"
        return f"postgresql://{auth}@/{database}?host={self.socket_dir}"

    def add_password_role(self, role: str, password: str) -> None:
        """A login role that must give ``password`` over the socket (scram-sha-256), with CONNECT only."""
        self.execute(f"DROP ROLE IF EXISTS {role}", f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        hba = self.data_dir / "pg_hba.conf"
        line = f"local all {role} scram-sha-256\n"
        text = hba.read_text()
        if line not in text:
            hba.write_text(line + text)  # first match wins: before the trust lines
        self.execute("SELECT pg_reload_conf()")

    def load_csv(self, table: str, columns: str, csv: Path) -> None:
        """``CREATE TABLE table (columns)`` and ``COPY`` the CSV (header row) into it, in file order."""
        import psycopg

        with psycopg.connect(self.admin_uri, autocommit=True) as con:
            con.execute(f"DROP TABLE IF EXISTS {table}")
            con.execute(f"CREATE TABLE {table} ({columns})")
            with con.cursor().copy(f"COPY {table} FROM STDIN WITH (FORMAT csv, HEADER true)") as cp:
                cp.write(csv.read_bytes())


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL server for the session (skipped, with the reason, if it cannot start)."""
    try:
        import pgserver
        import psycopg  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"PostgreSQL tests need pgserver and psycopg (the dev extra): {exc}")
    folder = Path(tempfile.mkdtemp(prefix="dpr-pg-"))
    try:
        srv = pgserver.get_server(str(folder), cleanup_mode="stop")
    except Exception as exc:  # noqa: BLE001 - any failure to start is a skip with its reason
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"a PostgreSQL server could not be started with pgserver here: {type(exc).__name__}: {exc}")
    uri = srv.get_uri()
    socket_dir = uri.split("host=", 1)[1].split("&", 1)[0]
    try:
        yield PgServer(uri, socket_dir, folder)
    finally:
        srv.cleanup()
        shutil.rmtree(folder, ignore_errors=True)
