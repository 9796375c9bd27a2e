#!/usr/bin/env bash
# Copies the dashboard's charting library from node_modules (installed by `npm ci` from the pinned
# package-lock.json) into the gitignored static vendor directory. Called by hack/setup.sh.
set -euo pipefail
cd "$(dirname "$0")"
src=node_modules/chart.js/dist/chart.umd.min.js
dst=results/static/vendor/chart.umd.min.js
if [ ! -f "$src" ]; then
  echo "dashboard: $src missing; run 'npm ci' in dashboard/ (hack/setup.sh does it)" >&2
  exit 1
fi
mkdir -p "$(dirname "$dst")"
cmp -s "$src" "$dst" || cp "$src" "$dst"
