"""prism's twins: the modules of older releases (guest.system.TWINS:
prism-v2, v2's; prism-v3, 3.0.0's), built under names of their own so
that one loads beside the current prism in one guest. A benchmark that
names prism and a twin then interleaves them in the same boots, and the
current code is compared with the release run by run, as issues "prism
v3" (v3 against v2) and 56 (v4 against 3.0.0) ask, instead of across
reports made weeks apart on other code.

A twin's sources come from git (`git archive REV module`) into the cache
(cache_dir()/twin/REV/src), never into the repository, and what two
modules loaded at once must not share is renamed there (rename()):
- the elevator name (.elevator_name; queue/scheduler lists and takes it):
  Twin.scheduler, "prism-v2" or "prism-v3" (ELV_NAME_MAX is 16 on every
  pin: at most 15 characters; elevator names with a dash, such as
  mq-deadline, are ordinary; no dot, as the module's name is made of it
  and kbuild pastes that into C identifiers, __KBUILD_MODNAME);
- the module: Kbuild's object, hence the .ko's file name and the name of
  the loaded module, and MODULE_ALIAS, which is what the kernel's
  request_module() asks for when a scheduler is selected (NAME-iosched):
  Twin.module, "prism-v2-iosched" or "prism-v3-iosched";
- from 3.0.0 on, the blkcg policy's cgroup file. blkcg policies are
  global: 3.0.0 registers one (prism_cgroup.c) whose cftype "prism.weight"
  the core offers as io.prism.weight in every cgroup but the root. Two
  policies offering one name do not coexist: blkcg_policy_register()
  WARNs when it cannot add the second's files, and then every mkdir of a
  cgroup fails with EEXIST (css_populate_dir() adds each policy's files).
  The twin's is Twin.weight_file, io.prism-v3.weight (the messages that
  name the file, and the file's pr_fmt prefix, say the twin's name too).
  A policy takes one of BLKCG_MAX_POLS slots, 6 on every pin; Debian's
  kernels use two (blk-throttle, blk-iocost; no iolatency or ioprio),
  bfq a third when it is loaded, prism a fourth and the twin a fifth, so
  all load together (were there none left, the twin would load without
  its file and schedule per process, saying so, as prism does).
Nothing else is global: neither release exports a symbol or registers a
slab cache, tracepoint, parameter or elevator alias (checked: _GLOBALS);
their other non-static functions are the module's own (kernel modules
link only through exports); their sysfs and debugfs files hang off each
queue (queue/iosched/, debugfs block/DEV/sched/) under whichever
scheduler the queue has, and 3.0.0's per-cgroup data is its policy's.

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
from ..guest.system import TWINS, Twin
from . import build, kernels

# What a twin's kbuild needs of the module/ tree; the rest (the Makefile,
# dkms.conf and their scripts) installs a module named prism-iosched,
# which a twin never is, and is dropped.
_KEEP = re.compile(r"Kbuild|VERSION|kernel-range|[\w-]+\.[ch]")


def get(name: str) -> Twin:
    """The twin named @name (guest.system.TWINS)."""
    if name not in TWINS:
        raise UsageError(f"no twin {name!r}; the twins: {', '.join(TWINS)}")
    return TWINS[name]


def commit(tw: Twin, rev: str | None = None) -> str:
    """The full commit hash of @tw's revision (or of @rev) in the
    repository prism runs from."""
    rev = rev or tw.rev
    r = subprocess.run(["git", "-C", str(build.REPO), "rev-parse", "--verify", "--quiet",
                        f"{rev}^{{commit}}"], capture_output=True, text=True)
    if r.returncode:
        raise PrismError(f"{tw.scheduler} is prism at {rev}, built from git history: "
                         f"{build.REPO} is not a git checkout that has {rev}"
                         + (f" ({r.stderr.strip()})" if r.stderr.strip() else ""))
    return r.stdout.strip()


def version(tw: Twin) -> str:
    """module/VERSION at @tw's commit: the release it is (0.1.0, 3.0.0)."""
    r = subprocess.run(["git", "-C", str(build.REPO), "show", f"{commit(tw)}:module/VERSION"],
                       capture_output=True, text=True)
    if r.returncode:
        raise PrismError(f"{tw.scheduler}: no module/VERSION at {tw.rev}")
    return r.stdout.strip()


def describe(tw: Twin) -> dict:
    """What a plan records of the twin: which code the name stood for."""
    return {"scheduler": tw.scheduler, "module": tw.module, "rev": tw.rev,
            "commit": commit(tw), "version": version(tw)}


def check_kernel(k: kernels.Kernel, tw: Twin) -> None:
    """Refuse a kernel @tw does not build for, before anything is built
    or booted."""
    if k.name not in tw.series:
        raise UsageError(f"{tw.scheduler} (prism {tw.release}, at {tw.rev}) builds for "
                         f"{', '.join(tw.series)} only, not {k.name}: the kernels of its "
                         "release. Leave it out of --schedulers, or pass --kernel "
                         + ",".join(tw.series))


# What a module can hold that is global to the kernel, beyond the names
# rename() changes, and neither release has: a twin with one would collide
# with prism, or share it.
_GLOBALS = (
    (r"\.elevator_alias\b", "an elevator alias (a second name the kernel matches)"),
    (r"\bEXPORT_SYMBOL", "exported symbols"),
    (r"\bkmem_cache_create\b|\bKMEM_CACHE\(", "a slab cache (a name of its own in "
     "/proc/slabinfo)"),
    (r"\bCREATE_TRACE_POINTS\b", "tracepoints (events/prism/ in tracefs)"),
    (r"\bmodule_param", "module parameters"),
    (r"\bdebugfs_create_dir\b", "a debugfs directory of its own (not a queue's)"),
)
# The blkcg policy (3.0.0's prism_cgroup.c), which rename() gives the
# twin's file name; more than one policy it would not know how to name.
_POLICY = r"\bblkcg_policy_register\("


def _sub(tw: Twin, files: list[Path], pattern: str, repl: str, expect: int | None,
         what: str, flags: int = 0) -> None:
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
        raise PrismError(f"{tw.scheduler}: renaming {what}: expected {want} match of "
                         f"{pattern!r} in {', '.join(f.name for f in files)}, found {found}. "
                         "The revision's module is not laid out as prism/host/twin.py "
                         "expects: update rename() for it")


def _rename_policy(tree: Path, tw: Twin, sources: list[Path]) -> None:
    """The blkcg policy's cgroup file (see the module's docstring):
    io.prism.weight becomes @tw.weight_file, in the policy's cftype and in
    the messages that name it, and the policy's file logs as the twin."""
    policy = [f for f in sources if re.search(_POLICY, f.read_text())]
    if not policy:
        if tw.weight_file:
            raise PrismError(f"{tw.scheduler}: TWINS says it has the cgroup file "
                             f"{tw.weight_file}, but module/ at {tw.rev} registers no "
                             "blkcg policy")
        return
    if len(policy) != 1 or not tw.weight_file:
        raise PrismError(f"{tw.scheduler}: module/ at {tw.rev} registers a blkcg policy "
                         f"({', '.join(f.name for f in policy)}), which prism's own module "
                         "would share"
                         + ("" if tw.weight_file else ": name its file (Twin.weight_file "
                            "in prism/guest/system.py)"))
    want = f"io.{tw.scheduler}.weight"
    if tw.weight_file != want:
        raise PrismError(f"{tw.scheduler}: its cgroup file is {want}, not {tw.weight_file}")
    # The cftype: the core prefixes the controller's name ("io.").
    _sub(tw, policy, r'(\.name\s*=\s*)"prism\.weight"', rf'\1"{tw.scheduler}.weight"', 1,
         "the blkcg policy's cgroup file")
    _sub(tw, policy, r'("[^"\n]*)\bio\.prism\.weight\b', rf"\1{tw.weight_file}", None,
         "the cgroup file in the policy's messages")
    _sub(tw, policy, r'(#define pr_fmt\(fmt\) )"prism: "', rf'\1"{tw.scheduler}: "', 1,
         "the policy's log prefix")


def rename(tree: Path, tw: Twin) -> None:
    """Give the module/ tree of @tw's revision in @tree the twin's names
    (see the module's docstring), and say in its version which commit it
    is."""
    sources = sorted(tree.glob("*.c"))
    kbuild = [tree / "Kbuild"]
    if not kbuild[0].exists() or not sources:
        raise PrismError(f"{tw.scheduler}: no Kbuild or C sources in module/ at {tw.rev}")
    for pattern, why in _GLOBALS:
        hits = [f.name for f in sources + sorted(tree.glob("*.h"))
                if re.search(pattern, f.read_text())]
        if hits:
            raise PrismError(f"{tw.scheduler}: module/ at {tw.rev} has {why} "
                             f"({pattern!r} in {', '.join(hits)}), which prism's own "
                             "module would share: rename() does not know how to give "
                             "the twin its own")
    _sub(tw, sources, r'(\.elevator_name\s*=\s*)"prism"', rf'\1"{tw.scheduler}"', 1,
         "the elevator name")
    _sub(tw, sources, r'MODULE_ALIAS\("prism-iosched"\)', f'MODULE_ALIAS("{tw.module}")', 1,
         "the module alias")
    _rename_policy(tree, tw, sources)
    # The object (obj-m), then every other mention: the composite's
    # variables (prism-iosched-y, prism-iosched-$(CONFIG_...)) and comments.
    _sub(tw, kbuild, r"^(obj-m\s*:=\s*)prism-iosched\.o$", rf"\1{tw.module}.o", 1,
         "the module's object", re.M)
    _sub(tw, kbuild, r"\bprism-iosched\b", tw.module, None, "the object's variables")
    version_file = tree / "VERSION"
    version_file.write_text(f"{version_file.read_text().strip()}+{commit(tw)[:12]}\n")


def _stamp(tw: Twin) -> str:
    """What an extracted tree was made from: the commit, the twin's names
    and the rename rules (this file), so that a change to any extracts it
    again."""
    return (f"{commit(tw)}\n{tw!r}\n"
            f"{hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}\n")


def source_dir(tw: Twin) -> Path:
    return kernels.cache_dir() / "twin" / tw.rev / "src"


def extract(tw: Twin) -> Path:
    """module/ of @tw's revision, renamed (rename()), in the cache; reused
    while the commit and the rename rules are the same."""
    dest = source_dir(tw)
    stamp = _stamp(tw)
    if (dest / ".stamp").exists() and (dest / ".stamp").read_text() == stamp:
        return dest
    r = subprocess.run(["git", "-C", str(build.REPO), "archive", "--format=tar",
                        commit(tw), "module"], capture_output=True)
    if r.returncode:
        raise PrismError(f"git archive {tw.rev} module failed: "
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
        rename(tree, tw)
        (tree / ".stamp").write_text(stamp)
        shutil.rmtree(dest, ignore_errors=True)
        tree.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def tunables(tw: Twin) -> list[str]:
    """The twin's tunables, read from its own source (v2 keeps them in
    prism_sched.c, later revisions in prism_sysfs.c): a variant such as
    prism-v2:low_share=5 is checked against the module it will load."""
    tree = extract(tw)
    found = [f for f in sorted(tree.glob("*.c")) if "struct elv_fs_entry" in f.read_text()]
    if len(found) != 1:
        raise PrismError(f"{tw.scheduler}: expected one source of tunables (an "
                         f"elv_fs_entry array) in module/ at {tw.rev}, found {len(found)}")
    return build.module_tunables(src=found[0])


def build_dir(k: kernels.Kernel, tw: Twin) -> Path:
    return kernels.cache_dir() / "twin" / tw.rev / k.abi


def module_path(k: kernels.Kernel, tw: Twin) -> Path:
    return build_dir(k, tw) / f"{tw.module}.ko"


def _digest(k: kernels.Kernel, tree: Path) -> str:
    """As build._sources_digest: the kernel, its block/, the compiler and
    every file of the renamed tree."""
    h = hashlib.sha256(f"{k.abi}\n{kernels.block_dir(k)}\n{build._compiler(k)}".encode())
    for f in sorted(tree.iterdir()):
        if f.name != ".stamp":
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def build_twin(k: kernels.Kernel, tw: Twin, fetch: bool = True) -> Path:
    """Compile @tw out of tree against @k, as build.build() compiles
    prism (the same kbuild, block/ and build root; any warning fails it);
    the same sources for the same kernel are compiled once."""
    check_kernel(k, tw)
    if fetch:
        kernels.fetch(k)
    if not (k.headers_dir / "Makefile").exists():
        raise PrismError(f"{k.headers_dir} missing: run '{kernels.fetch_command(k)}'")
    tree = extract(tw)
    out = build_dir(k, tw)
    stamp = out / "sources.sha256"
    digest = _digest(k, tree)
    if stamp.exists() and stamp.read_text() == digest and module_path(k, tw).exists():
        return module_path(k, tw)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(tree, out, ignore=shutil.ignore_patterns(".stamp"))
    where = f" in the {k.root} build root" if k.root else ""
    kernels.log(f"building {tw.module}.ko (prism {tw.release}, at {tw.rev}) for "
                f"{k.abi}{where}")
    block = f"{build.ROOT_SRC}/block" if k.root else str(kernels.block_dir(k))
    build._kbuild(k, out, [f"PRISM_BLOCK_DIR={block}"], f"{tw.scheduler} module")
    ko = module_path(k, tw)
    if not ko.exists():
        raise PrismError(f"build succeeded but {ko} is missing")
    stamp.write_text(digest)
    return ko
