# Sourced by scripts/setup.sh and .ci/run: where the Python package and
# its dependencies live, a virtual environment in the cache, never the
# system's python3 ($PRISM_VENV, else venv/ in $PRISM_CACHE or
# ~/.cache/prism).
PRISM_VENV="${PRISM_VENV:-${PRISM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/prism}/venv}"
