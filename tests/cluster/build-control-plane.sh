#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and helm from their Go modules
# into a cache outside the repository, so later runs (and CI on the same machine) reuse them.
# Usage: tests/cluster/build-control-plane.sh   -> prints the bin directory on its last line.
set -euo pipefail

K8S_VERSION="${TPCMESH_K8S_VERSION:-v1.34.4}"
HELM_VERSION="${TPCMESH_HELM_VERSION:-v3.16.4}"
CACHE="${TPCMESH_CACHE:-$HOME/.cache/tpcmesh}"
BIN="$CACHE/k8s-$K8S_VERSION/bin"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
mkdir -p "$BIN"

need=()
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  [ -x "$BIN/$b" ] || need+=("$b")
done

if [ "${#need[@]}" -gt 0 ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  echo "Building ${need[*]} from k8s.io/kubernetes $K8S_VERSION (first time only, several minutes)..." >&2
  # The kubernetes module replaces each k8s.io staging module with a local path; a consumer must
  # replace them with the published v0.Y.Z versions instead. Read the list from the module's go.mod.
  gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  {
    echo "module tpcmesh.local/controlplane"
    echo
    echo "go $(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    grep -Eo 'k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" | awk '{print $1}' | sort -u |
      while read -r m; do echo "replace $m => $m $STAGING_VERSION"; done
  } > "$work/go.mod"
  cat > "$work/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
  for b in "${need[@]}"; do
    (cd "$work" && GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$BIN/$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv "$BIN/$b.tmp" "$BIN/$b"
    echo "Built $b" >&2
  done
fi

if [ ! -x "$BIN/helm" ]; then
  echo "Building helm $HELM_VERSION..." >&2
  GOBIN="$BIN" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
echo "$BIN"
