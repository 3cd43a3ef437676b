"""prism: a priority-aware blk-mq I/O scheduler and its evaluation harness."""

__version__ = "0.1.0"
