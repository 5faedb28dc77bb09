#!/usr/bin/env bash
# Build the upstream contract environment: a SEPARATE virtual environment holding vLLM-Omni's
# real server code (runners/upstream/requirements-contract.txt), used only as the server
# command of the upstream contract tests and `campaign-bot runner check-flags`.  It is separate
# from campaign-bot's own environment because vLLM 0.30.0 pins torch 2.13.0 while campaign-bot's
# [media] extra pins torch 2.14.1.
#
# Usage: runners/upstream/install-contract-venv.sh [VENV_DIR]
#   VENV_DIR defaults to $CAMPAIGN_BOT_UPSTREAM_VENV, else .venv-upstream at the repository root
#   (a source checkout), else ~/.cache/campaign-bot/venv-upstream (an installed package).
#   PYTHON   interpreter to build it with (default python3; CPython 3.11, as the pins were
#            resolved for it).
#   PIP_FIND_LINKS / PIP_EXTRA_INDEX_URL (pip's own variables) say where torch 2.13.0+cpu is
#            when it is not in pip's configured find-links.
# An existing VENV_DIR is replaced.  Measured on a 2-core machine: 2.5 min idle, 4 min loaded; 2.6 GB.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ -f "$root/pyproject.toml" ]; then default="$root/.venv-upstream"  # a source checkout
else default="${XDG_CACHE_HOME:-$HOME/.cache}/campaign-bot/venv-upstream"; fi  # installed
venv="${1:-${CAMPAIGN_BOT_UPSTREAM_VENV:-$default}}"
python="${PYTHON:-python3}"
req="$here/requirements-contract.txt"
t0=$(date +%s)
step() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }

step "creating $venv with $("$python" --version 2>&1)"
rm -rf "$venv"
"$python" -m venv "$venv"
step "installing the pinned set from ${req#"$root"/} (pip --no-deps: nothing is resolved)"
if ! "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$req"; then
  echo "FAILED: pip could not install $req." >&2
  echo "torch==2.13.0+cpu must be reachable: a local wheel folder (PIP_FIND_LINKS=DIR) or" >&2
  echo "PyTorch's CPU index (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu)." >&2
  exit 1
fi
step "checking that the server code imports (launcher --list-flags)"
if ! "$venv/bin/python" "$here/launch_fake_engine.py" --list-flags >"$venv/serve-flags.out" \
    2>"$venv/serve-flags.err"; then
  echo "FAILED: vLLM-Omni's serve parser did not build; see $venv/serve-flags.err" >&2
  exit 1
fi
size="$(du -sh "$venv" | cut -f1)"
step "done: $venv ($size); vLLM-Omni $("$venv/bin/python" -c \
  'import importlib.metadata as m; print(m.version("vllm-omni"))')"
