"""prism: a priority-aware blk-mq I/O scheduler and its evaluation harness."""

from pathlib import Path


def _version() -> str:
    # The project's one version, which the module carries too
    # (MODULE_VERSION); the guest runs a copy of this package without
    # module/, and finds the installed metadata instead.
    try:
        return (Path(__file__).resolve().parent.parent / "module" / "VERSION").read_text().strip()
    except OSError:
        from importlib.metadata import PackageNotFoundError, version
        try:
            return version("prism-iosched")
        except PackageNotFoundError:
            return "unknown"


__version__ = _version()
