"""A real PostgreSQL server for the tests: initdb into a temporary directory as the `postgres` user, the server
listening on a Unix socket in that directory only (no TCP), one database. It dies with the test process
(PR_SET_PDEATHSIG) and is stopped, with its directory removed, on exit.

    with PostgresLab() as pg:
        url = pg.url          # postgresql+psycopg2://postgres@/hvd?host=/tmp/...&port=5432
"""

import ctypes
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

from lab_common import Lab

BIN = "/usr/lib/postgresql/15/bin"
_PR_SET_PDEATHSIG = 1


def unavailable():
    """Why the lab cannot run here, or None."""
    if not os.path.exists(os.path.join(BIN, "postgres")):
        return f"no PostgreSQL server at {BIN} (install postgresql)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user"
    if os.geteuid() != 0:
        return "not root (the server runs as the postgres user)"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "python3-psycopg2 is not installed"
    return None


def _as_postgres():
    user = pwd.getpwnam("postgres")
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class PostgresLab(Lab):
    def __init__(self, database: str = "hvd", port: int = 5432):
        self.dir = tempfile.mkdtemp(prefix="hvd-pg-")
        self.data = os.path.join(self.dir, "data")
        self.port = port
        self.database = database
        self.server = None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://postgres@/{self.database}?host={self.dir}&port={self.port}"

    def _run(self, *args):
        r = subprocess.run(list(args), capture_output=True, text=True, preexec_fn=_as_postgres, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")

    def _setup(self):
        os.chmod(self.dir, 0o777)
        self._run(os.path.join(BIN, "initdb"), "-D", self.data, "-A", "trust", "-U", "postgres")
        self.server = subprocess.Popen(
            [os.path.join(BIN, "postgres"), "-D", self.data, "-k", self.dir, "-p", str(self.port), "-c",
             "listen_addresses=", "-c", "fsync=off"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "server.log"), "w"),
            preexec_fn=_as_postgres)
        deadline = time.time() + 30
        while time.time() < deadline:
            r = subprocess.run([os.path.join(BIN, "pg_isready"), "-h", self.dir, "-p", str(self.port)],
                               capture_output=True)
            if r.returncode == 0:
                break
            if self.server.poll() is not None:
                raise RuntimeError(f"postgres exited: {open(os.path.join(self.dir, 'server.log')).read()}")
            time.sleep(0.1)
        else:
            raise TimeoutError("postgres did not accept connections within 30 s")
        self._run(os.path.join(BIN, "createdb"), "-h", self.dir, "-p", str(self.port), "-U", "postgres",
                  self.database)

    def close(self):
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
