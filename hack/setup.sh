#!/usr/bin/env bash
# Installs everything tpcmesh needs on a Debian machine: Debian packages (when root), the Python
# virtualenv with the three components and the test tools, and the dashboard's charting library.
# Idempotent: a second run only checks. Usage: hack/setup.sh [--no-apt]
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
  command -v go >/dev/null || missing+=(golang-go)
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
  "$PYTHON" -m venv "$VENV"
fi
mkdir -p "$stamp_dir"
req_hash="$(cat requirements-dev.txt agent/pyproject.toml operator/pyproject.toml dashboard/requirements.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp_dir/pip-$req_hash" ]; then
  log "Installing Python packages into $VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -e ./agent -e ./operator -r dashboard/requirements.txt -r requirements-dev.txt
  rm -f "$stamp_dir"/pip-* && touch "$stamp_dir/pip-$req_hash"
fi

if [ -f dashboard/package.json ] && command -v npm >/dev/null; then
  if [ ! -d dashboard/node_modules ] || [ dashboard/package-lock.json -nt dashboard/node_modules ]; then
    log "Installing the dashboard's charting library (npm)"
    (cd dashboard && npm ci --silent --no-audit --no-fund)
  fi
fi
if [ -x dashboard/hack-assets.sh ]; then dashboard/hack-assets.sh; fi
log "Setup complete"
