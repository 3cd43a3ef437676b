"""One exception type for problems the user can act on; the CLI prints its
message on one line and exits non-zero instead of showing a traceback."""


class PrismError(Exception):
    pass
