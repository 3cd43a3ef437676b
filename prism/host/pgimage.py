"""The pgbench database image, built on the host: the database is
initialised once per scale at the host's native speed (pgbench -i under
TCG would take most of an hour) into an ext4 image cached under
~/.cache/prism/pgbench, which the guest (prism.guest.pgbench.Database)
writes onto the device under test. PostgreSQL runs as nobody, as in the
guest.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..common.errors import PrismError
from ..guest.pgbench import GROUP, USER, as_user, bindir, run_checked

# Scale 200 is about 3 GB of tables and indexes: well over what a 2 GiB
# guest can cache, so transactions read from the device.
DEFAULT_SCALE = 200
CACHE = Path(os.environ.get("PRISM_CACHE", Path.home() / ".cache" / "prism")) / "pgbench"


def image(scale: int = DEFAULT_SCALE, cache: Path = CACHE) -> Path:
    """An ext4 image holding pgdata/ (initialised by pgbench -i -s @scale)
    and run/ (the server's socket directory), both owned by nobody; built
    once and cached."""
    pg = bindir()
    version = pg.parent.name
    img = cache / f"pgdata-{version}-s{scale}.img"
    if img.exists():
        return img
    for tool in ("setpriv", "mkfs.ext4"):
        if not shutil.which(tool):
            raise PrismError(f"{tool} not found (apt-get install "
                             f"{'util-linux' if tool == 'setpriv' else 'e2fsprogs'})")
    # Built outside the cache: ~ (root's home) is closed to nobody.
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"prism-pgbench-s{scale}-", dir="/var/tmp"))
    work.chmod(0o755)
    root = work / "root"
    (root / "pgdata").mkdir(parents=True)
    (root / "run").mkdir()
    for d in (work, root / "pgdata", root / "run"):
        shutil.chown(d, USER, GROUP)
    print(f"prism: initialising a pgbench database at scale {scale} (once; cached in {img})",
          flush=True)
    data, sock = root / "pgdata", root / "run"
    run_checked(as_user([str(pg / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                  "--no-sync"]), "initdb")
    run_checked(as_user([str(pg / "pg_ctl"), "-D", str(data), "-w", "-l", str(work / "server.log"),
                  "-o", f"-k {sock} -c listen_addresses=''", "start"]), "starting PostgreSQL")
    try:
        run_checked([str(pg / "pgbench"), "-i", "-q", "-s", str(scale), "-h", str(sock),
              "-U", "postgres", "postgres"], "pgbench -i", timeout=3600)
        # WAL is recycled past max_wal_size: this bounds what runs add.
        for sql in ("ALTER SYSTEM SET max_wal_size = '512MB'", "CHECKPOINT"):
            run_checked([str(pg / "psql"), "-h", str(sock), "-U", "postgres", "-c", sql,
                  "postgres"], sql)
    finally:
        subprocess.run(as_user([str(pg / "pg_ctl"), "-D", str(data), "-w", "-m", "fast",
                                "stop"]), capture_output=True)
    (data / "postmaster.log").unlink(missing_ok=True)
    used = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    # Room for what the runs write (WAL up to max_wal_size, history rows);
    # the whole image is written to the device at each boot, so no more.
    size_mb = int(math.ceil((used / 2**20 + 1024) / 256) * 256)
    tmp = img.with_suffix(".tmp")
    run_checked(["mkfs.ext4", "-q", "-F", "-d", str(root), "-E",
          "lazy_itable_init=0,lazy_journal_init=0", str(tmp), f"{size_mb}M"], "mkfs.ext4 -d")
    tmp.rename(img)
    shutil.rmtree(work, ignore_errors=True)
    return img
