#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, and for the real nodes of `tpcmesh-local cluster`
# kubelet, kube-proxy, the pause binary, CoreDNS, plus kubectl and helm for their users, from their Go modules (and pause.c) into a cache outside
# the repository, so later runs (and CI on the same machine) reuse them.
# Usage: tests/cluster/build-control-plane.sh   -> prints the bin directory on its last line.
set -euo pipefail

K8S_VERSION="${TPCMESH_K8S_VERSION:-v1.34.4}"
HELM_VERSION="${TPCMESH_HELM_VERSION:-v3.16.4}"
COREDNS_VERSION="${TPCMESH_COREDNS_VERSION:-v1.12.4}"
CACHE="${TPCMESH_CACHE:-$HOME/.cache/tpcmesh}"
BIN="$CACHE/k8s-$K8S_VERSION/bin"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
mkdir -p "$BIN"

# A Go that k8s.io/kubernetes' go.mod accepts: the one on PATH, else the official toolchain from the module proxy.
go_bin="$(python3 "$(dirname "$0")/../../hack/go-toolchain.py" --module "k8s.io/kubernetes@$K8S_VERSION")"
export PATH="$go_bin:$PATH" GOTOOLCHAIN=local

# Stamp the release into the binaries (a plain `go build` reports v0.0.0-master, which Helm's kubeVersion check
# and clients reject); a binary without the stamp is rebuilt (only the link step reruns, from Go's build cache).
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
VERSION_LDFLAGS="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
VERSION_LDFLAGS+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
VERSION_LDFLAGS+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1"
VERSION_LDFLAGS+=" -X k8s.io/client-go/pkg/version.gitMinor=$minor"
need=()
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
  if [ "$b" = kubectl ]; then version=(version --client); else version=(--version); fi
  if [ ! -x "$BIN/$b" ] || ! "$BIN/$b" "${version[@]}" 2>/dev/null | grep -qF "$K8S_VERSION"; then need+=("$b"); fi
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
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
  for b in "${need[@]}"; do
    (cd "$work" && GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w $VERSION_LDFLAGS" -o "$BIN/$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv "$BIN/$b.tmp" "$BIN/$b"
    echo "Built $b" >&2
  done
fi

if [ ! -x "$BIN/helm" ] || ! "$BIN/helm" version --template '{{.Version}}' 2>/dev/null | grep -qxF "$HELM_VERSION"; then
  echo "Building helm $HELM_VERSION..." >&2
  # As Helm's own Makefile does: its version, and the Kubernetes version `helm template`/`lint` assume
  # (that of the client-go it is built with: v0.31 for Helm 3.16).
  HELM_LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in pkg/lint/rules pkg/chartutil; do
    HELM_LDFLAGS+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=31"
  done
  GOBIN="$BIN" go install -trimpath -ldflags "$HELM_LDFLAGS" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
# The pod sandbox ("pause") binary, from the C source in the kubernetes module, linked statically so the image is
# just that one file (registry.k8s.io is not reachable here; cluster.py wraps it into an image).
if [ ! -x "$BIN/pause" ]; then
  src="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  gcc -Os -static -Wall -Werror -o "$BIN/pause.tmp" "$src/build/pause/linux/pause.c"
  mv "$BIN/pause.tmp" "$BIN/pause"
  echo "Built pause" >&2
fi

# CoreDNS, the cluster DNS the real cluster runs as a Deployment (its own module; no plugin list changes), linked
# statically (no cgo) because its image holds nothing but the binary.
if [ ! -x "$BIN/coredns" ] || ! "$BIN/coredns" -version 2>/dev/null | grep -qF "${COREDNS_VERSION#v}" \
   || ldd "$BIN/coredns" >/dev/null 2>&1; then
  echo "Building coredns $COREDNS_VERSION..." >&2
  CGO_ENABLED=0 GOBIN="$BIN" GOFLAGS=-mod=mod go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
fi
echo "$BIN"
