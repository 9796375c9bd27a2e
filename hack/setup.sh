#!/usr/bin/env bash
# Installs everything tpcmesh needs on a Debian machine: Debian packages (when root), the Python virtualenv with
# the three components, the lab (tpcmesh-local) and the test tools, and the dashboard's charting library (npm).
# Without root it installs what it can and says what is missing: `make demo` still runs (protocols whose programs
# are missing are left out, the pair/compare pages lose their plots without npm). Go is not taken from Debian
# (bookworm's 1.19 cannot build Kubernetes 1.34): tests/cluster/build-control-plane.sh gets the official toolchain
# through hack/go-toolchain.py. Idempotent: a second run only checks. Usage: hack/setup.sh [--no-apt]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
stamp_dir="$VENV/.tpcmesh"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

want_apt=1
[ "${1:-}" = "--no-apt" ] && want_apt=0

if [ "$want_apt" = 1 ]; then
  mapfile -t pkgs < <(grep -Ev '^\s*(#|$)' hack/debian-packages.txt | cut -f1)
  missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  command -v npm >/dev/null || missing+=(npm)
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
      log "Installing Debian packages: ${missing[*]}"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
      log "Not root: skipping Debian packages ${missing[*]} (protocols whose programs are missing are reported unavailable)"
    fi
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  log "Creating virtualenv $VENV"
  if ! "$PYTHON" -m venv "$VENV"; then
    rm -rf "$VENV"
    echo "hack/setup.sh: '$PYTHON -m venv' failed: install the Debian package python3-venv (as root: apt-get install python3-venv, or run this script as root)" >&2
    exit 1
  fi
fi
mkdir -p "$stamp_dir"
req_hash="$(cat requirements-dev.txt agent/pyproject.toml operator/pyproject.toml lab/pyproject.toml dashboard/requirements.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp_dir/pip-$req_hash" ]; then
  log "Installing Python packages into $VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -e ./agent -e ./operator -e ./lab -r dashboard/requirements.txt -r requirements-dev.txt
  rm -f "$stamp_dir"/pip-* && touch "$stamp_dir/pip-$req_hash"
fi

if command -v npm >/dev/null; then
  if [ ! -d dashboard/node_modules ] || [ dashboard/package-lock.json -nt dashboard/node_modules ]; then
    log "Installing the dashboard's charting library (npm)"
    (cd dashboard && npm ci --silent --no-audit --no-fund)
  fi
fi
if [ -d dashboard/node_modules ]; then
  dashboard/hack-assets.sh
elif [ ! -f dashboard/results/static/vendor/chart.umd.min.js ]; then
  log "Warning: npm is missing, so the dashboard's charting library is not installed: the grid works, the pair and comparison pages show no plots (install npm, e.g. as root: apt-get install npm, and rerun)"
fi
log "Setup complete"
