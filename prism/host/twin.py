"""prism's twin: the module of an older revision (v2 unless told
otherwise), built under names of its own so that it loads beside the
current prism in one guest. A benchmark that names both then interleaves
them in the same boots, and v3 is compared with v2 run by run, as issue
"prism v3" asks, instead of across reports made weeks apart on other code.

The twin's sources come from git (`git archive REV module`) into the cache
(cache_dir()/twin/REV/src), never into the repository, and what two
modules loaded at once must not share is renamed there (rename()):
- the elevator name (.elevator_name; queue/scheduler lists and takes it):
  guest.system.TWIN_SCHEDULER, "prism-v2" (ELV_NAME_MAX is 16 on every
  pin: at most 15 characters; elevator names with a dash, such as
  mq-deadline, are ordinary);
- the module: Kbuild's object, hence the .ko's file name and the name of
  the loaded module, and MODULE_ALIAS, which is what the kernel's
  request_module() asks for when a scheduler is selected (NAME-iosched):
  guest.system.TWIN_MODULE, "prism-v2-iosched".
Nothing else of v2 is global: it exports no symbol and registers no blkcg
policy, slab cache, tracepoint or parameter; its other non-static
functions are the module's own (kernel modules link only through
exports); its sysfs and debugfs files hang off each queue (queue/iosched/,
debugfs block/DEV/sched/) under whichever scheduler the queue has.

Each change is an exact substitution that must match as often as expected
(most of them once): a revision whose module reads otherwise stops the
build with a message naming the substitution, rather than building a
second module that registers itself as "prism".
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from ..common.errors import PrismError, UsageError
from ..guest.system import TWIN_MODULE, TWIN_SCHEDULER
from . import build, kernels

# v2's last commit (CHANGELOG.md's "v2": the module as it was before v3's
# work began), which v3 is measured against.
TWIN_REV = "01b59b5"
# The series the twin builds for: v2's own pins, 6.1 and 6.12. Its module
# predates the 7.x compat (init_sched() with the core's elevator_queue,
# depth_updated() per queue, hrtimer_setup()), so a 7.x build would fail
# or, worse, build against an API it does not know.
TWIN_SERIES = ("6.1", "6.12")

# What the twin's kbuild needs of the module/ tree; the rest (the
# Makefile, dkms.conf and their scripts) installs a module named
# prism-iosched, which the twin never is, and is dropped.
_KEEP = re.compile(r"Kbuild|VERSION|kernel-range|[\w-]+\.[ch]")


def commit(rev: str = TWIN_REV) -> str:
    """@rev's full commit hash in the repository prism runs from."""
    r = subprocess.run(["git", "-C", str(build.REPO), "rev-parse", "--verify", "--quiet",
                        f"{rev}^{{commit}}"], capture_output=True, text=True)
    if r.returncode:
        raise PrismError(f"{TWIN_SCHEDULER} is prism at {rev}, built from git history: "
                         f"{build.REPO} is not a git checkout that has {rev}"
                         + (f" ({r.stderr.strip()})" if r.stderr.strip() else ""))
    return r.stdout.strip()


def describe(rev: str = TWIN_REV) -> dict:
    """What a plan records of the twin: which code the name stood for."""
    return {"scheduler": TWIN_SCHEDULER, "module": TWIN_MODULE, "rev": rev,
            "commit": commit(rev)}


def check_kernel(k: kernels.Kernel, rev: str = TWIN_REV) -> None:
    """Refuse a kernel the twin does not build for, before anything is
    built or booted."""
    if k.name not in TWIN_SERIES:
        raise UsageError(f"{TWIN_SCHEDULER} (prism at {rev}) builds for "
                         f"{' and '.join(TWIN_SERIES)} only, not {k.name}: its module "
                         "predates prism's 7.x compat. Leave it out of --schedulers, or "
                         "pass --kernel " + ",".join(TWIN_SERIES))


# What a module can hold that is global to the kernel, beyond the names
# rename() changes, and v2 has none of: a twin with one would collide
# with prism, or share it (two blkcg policies both offering io.prism.weight).
_GLOBALS = (
    (r"\.elevator_alias\b", "an elevator alias (a second name the kernel matches)"),
    (r"\bEXPORT_SYMBOL", "exported symbols"),
    (r"\bblkcg_policy_register\b", "a blkcg policy (cgroup files io.prism.*)"),
    (r"\bkmem_cache_create\b", "a slab cache (a name of its own in /proc/slabinfo)"),
    (r"\bCREATE_TRACE_POINTS\b", "tracepoints (events/prism/ in tracefs)"),
    (r"\bmodule_param", "module parameters"),
)


def _sub(files: list[Path], pattern: str, repl: str, expect: int | None, what: str,
         flags: int = 0) -> None:
    """Replace @pattern by @repl across @files; exactly @expect matches
    in all (None: at least one), or fail naming @what."""
    found = 0
    for f in files:
        text, n = re.subn(pattern, repl, f.read_text(), flags=flags)
        if n:
            f.write_text(text)
        found += n
    if (found == 0) if expect is None else (found != expect):
        want = "at least one" if expect is None else str(expect)
        raise PrismError(f"{TWIN_SCHEDULER}: renaming {what}: expected {want} match of "
                         f"{pattern!r} in {', '.join(f.name for f in files)}, found {found}. "
                         "The revision's module is not laid out as prism/host/twin.py "
                         "expects: update rename() for it")


def rename(tree: Path, rev: str = TWIN_REV) -> None:
    """Give the module/ tree of @rev in @tree the twin's names (see the
    module's docstring), and say in its version which commit it is."""
    sources = sorted(tree.glob("*.c"))
    kbuild = [tree / "Kbuild"]
    if not kbuild[0].exists() or not sources:
        raise PrismError(f"{TWIN_SCHEDULER}: no Kbuild or C sources in module/ at {rev}")
    for pattern, why in _GLOBALS:
        hits = [f.name for f in sources + sorted(tree.glob("*.h"))
                if re.search(pattern, f.read_text())]
        if hits:
            raise PrismError(f"{TWIN_SCHEDULER}: module/ at {rev} has {why} "
                             f"({pattern!r} in {', '.join(hits)}), which prism's own "
                             "module would share: rename() does not know how to give "
                             "the twin its own")
    _sub(sources, r'(\.elevator_name\s*=\s*)"prism"', rf'\1"{TWIN_SCHEDULER}"', 1,
         "the elevator name")
    _sub(sources, r'MODULE_ALIAS\("prism-iosched"\)', f'MODULE_ALIAS("{TWIN_MODULE}")', 1,
         "the module alias")
    # The object (obj-m), then every other mention: the composite's
    # variables (prism-iosched-y, prism-iosched-$(CONFIG_...)) and comments.
    _sub(kbuild, r"^(obj-m\s*:=\s*)prism-iosched\.o$", rf"\1{TWIN_MODULE}.o", 1,
         "the module's object", re.M)
    _sub(kbuild, r"\bprism-iosched\b", TWIN_MODULE, None, "the object's variables")
    version = tree / "VERSION"
    version.write_text(f"{version.read_text().strip()}+{commit(rev)[:12]}\n")


def _stamp(rev: str) -> str:
    """What an extracted tree was made from: the commit, and the rename
    rules (this file), so that a change to either extracts it again."""
    return f"{commit(rev)}\n{hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}\n"


def source_dir(rev: str = TWIN_REV) -> Path:
    return kernels.cache_dir() / "twin" / rev / "src"


def extract(rev: str = TWIN_REV) -> Path:
    """module/ of @rev, renamed (rename()), in the cache; reused while
    the commit and the rename rules are the same."""
    dest = source_dir(rev)
    stamp = _stamp(rev)
    if (dest / ".stamp").exists() and (dest / ".stamp").read_text() == stamp:
        return dest
    r = subprocess.run(["git", "-C", str(build.REPO), "archive", "--format=tar",
                        commit(rev), "module"], capture_output=True)
    if r.returncode:
        raise PrismError(f"git archive {rev} module failed: "
                         + r.stderr.decode(errors="replace").strip()[-500:])
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Made whole beside its place, then moved there: a failed rename
    # leaves nothing that could be taken for a twin.
    tmp = Path(tempfile.mkdtemp(prefix="src.", dir=dest.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        tree = tmp / "module"
        for f in tree.iterdir():
            if not (f.is_file() and _KEEP.fullmatch(f.name)):
                shutil.rmtree(f) if f.is_dir() else f.unlink()
        rename(tree, rev)
        (tree / ".stamp").write_text(stamp)
        shutil.rmtree(dest, ignore_errors=True)
        tree.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def tunables(rev: str = TWIN_REV) -> list[str]:
    """The twin's tunables, read from its own source (v2 keeps them in
    prism_sched.c, later revisions in prism_sysfs.c): a variant such as
    prism-v2:low_share=5 is checked against the module it will load."""
    tree = extract(rev)
    found = [f for f in sorted(tree.glob("*.c")) if "struct elv_fs_entry" in f.read_text()]
    if len(found) != 1:
        raise PrismError(f"{TWIN_SCHEDULER}: expected one source of tunables (an "
                         f"elv_fs_entry array) in module/ at {rev}, found {len(found)}")
    return build.module_tunables(src=found[0])


def build_dir(k: kernels.Kernel, rev: str = TWIN_REV) -> Path:
    return kernels.cache_dir() / "twin" / rev / k.abi


def module_path(k: kernels.Kernel, rev: str = TWIN_REV) -> Path:
    return build_dir(k, rev) / f"{TWIN_MODULE}.ko"


def _digest(k: kernels.Kernel, tree: Path) -> str:
    """As build._sources_digest: the kernel, its block/, the compiler and
    every file of the renamed tree."""
    h = hashlib.sha256(f"{k.abi}\n{kernels.block_dir(k)}\n{build._compiler(k)}".encode())
    for f in sorted(tree.iterdir()):
        if f.name != ".stamp":
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def build_twin(k: kernels.Kernel, rev: str = TWIN_REV, fetch: bool = True) -> Path:
    """Compile the twin out of tree against @k, as build.build() compiles
    prism (the same kbuild, block/ and build root; any warning fails it);
    the same sources for the same kernel are compiled once."""
    check_kernel(k, rev)
    if fetch:
        kernels.fetch(k)
    if not (k.headers_dir / "Makefile").exists():
        raise PrismError(f"{k.headers_dir} missing: run '{kernels.fetch_command(k)}'")
    tree = extract(rev)
    out = build_dir(k, rev)
    stamp = out / "sources.sha256"
    digest = _digest(k, tree)
    if stamp.exists() and stamp.read_text() == digest and module_path(k, rev).exists():
        return module_path(k, rev)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(tree, out, ignore=shutil.ignore_patterns(".stamp"))
    where = f" in the {k.root} build root" if k.root else ""
    kernels.log(f"building {TWIN_MODULE}.ko (prism at {rev}) for {k.abi}{where}")
    block = f"{build.ROOT_SRC}/block" if k.root else str(kernels.block_dir(k))
    build._kbuild(k, out, [f"PRISM_BLOCK_DIR={block}"], f"{TWIN_SCHEDULER} module")
    ko = module_path(k, rev)
    if not ko.exists():
        raise PrismError(f"build succeeded but {ko} is missing")
    stamp.write_text(digest)
    return ko
