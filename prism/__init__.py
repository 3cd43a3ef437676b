"""prism: a priority-aware blk-mq I/O scheduler and its evaluation harness."""

from pathlib import Path

# The project's one version, which the module carries too (MODULE_VERSION).
__version__ = (Path(__file__).resolve().parent.parent / "module" / "VERSION").read_text().strip()
