"""A real S3 API server for the lab: versitygw (build-tools.sh builds it on first use) over a
local folder, on a free loopback port, for the adapter fetcher's s3:// tests.

Its posix backend serves each folder under its root as a bucket and each file below as an
object named by its relative path, so a test puts an adapter in a bucket by copying a folder:
what is copied is listed and read through the S3 API at once (no upload, no metadata needed)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .ports import free_port
from .tools import bindir, build
from .waiting import wait_until

REGION = "us-east-1"


@dataclass(frozen=True)
class ObjectStore:
    endpoint: str
    access_key: str
    secret_key: str
    region: str
    root: Path  # one folder per bucket

    def put_folder(self, folder: Path, bucket: str, prefix: str) -> str:
        """Copies `folder`'s files under `bucket`/`prefix` (the bucket made if missing); the
        s3:// URI of the prefix."""
        shutil.copytree(folder, self.root / bucket / prefix.strip("/"), dirs_exist_ok=True)
        return f"s3://{bucket}/{prefix.strip('/')}"

    def make_bucket(self, bucket: str) -> None:
        (self.root / bucket).mkdir(exist_ok=True)


def _answers(url: str) -> bool:
    """Whether anything answers HTTP at `url`: an S3 server refuses an unsigned request (403),
    which says as well as a 200 that it is up."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


@contextmanager
def object_store(timeout: float = 30) -> Iterator[ObjectStore]:
    """versitygw on 127.0.0.1 over a fresh temporary folder, with a random key pair; stopped
    and its folder removed on exit."""
    build("versitygw")
    binary = bindir("versitygw") / "versitygw"
    with tempfile.TemporaryDirectory(prefix="llmfleet-objectstore-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        store = ObjectStore(
            endpoint=f"http://127.0.0.1:{free_port()}",
            access_key=f"LLMFLEET{secrets.token_hex(6).upper()}",
            secret_key=secrets.token_urlsafe(30),
            region=REGION,
            root=root,
        )
        cmd = [
            str(binary),
            "--port",
            store.endpoint.removeprefix("http://"),  # loopback only, never every interface
            "--region",
            store.region,
            "--quiet",
            "posix",
            str(root),
        ]
        log_path = Path(tmp) / "versitygw.log"
        # The keys go by environment, not argv: other users of the machine can read argv.
        env = {
            **os.environ,
            "ROOT_ACCESS_KEY_ID": store.access_key,
            "ROOT_SECRET_ACCESS_KEY": store.secret_key,
        }
        with log_path.open("wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:

            def up() -> bool:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"versitygw exited ({proc.returncode}): {log_path.read_text()[-2000:]}"
                    )
                return _answers(store.endpoint)

            wait_until(up, timeout=timeout, interval=0.1, what=f"versitygw at {store.endpoint}")
            yield store
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
