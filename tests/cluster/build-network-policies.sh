#!/usr/bin/env bash
# Builds kube-network-policies (sigs.k8s.io/kube-network-policies, the Kubernetes SIG Network NetworkPolicy engine:
# nftables sends a connection's first packets to NFQUEUE, a userspace verdict from the API's NetworkPolicies)
# from its Go module into the control plane's bin directory, for `tpcmesh-local cluster`'s optional enforcement.
# One patch (kube-network-policies-nfqueue-compat.patch): its queue verdict goes through nft_compat's xt NFQUEUE
# target, because the lab's kernel is built without CONFIG_NFT_QUEUE (nftables' own `queue` is refused there).
# Usage: tests/cluster/build-network-policies.sh   -> prints the binary's path on its last line.
set -euo pipefail

VERSION="${TPCMESH_KNP_VERSION:-v0.8.0}"
K8S_VERSION="${TPCMESH_K8S_VERSION:-v1.34.4}"
CACHE="${TPCMESH_CACHE:-$HOME/.cache/tpcmesh}"
BIN="$CACHE/k8s-$K8S_VERSION/bin"
here="$(cd "$(dirname "$0")" && pwd)"
patch_file="$here/kube-network-policies-nfqueue-compat.patch"
out="$BIN/kube-network-policies"
# Rebuilt when the version or the patch changes.
stamp="$VERSION $(sha256sum "$patch_file" | cut -c1-16)"
if [ -x "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ]; then echo "$out"; exit 0; fi

go_bin="$(python3 "$here/../../hack/go-toolchain.py" --module "sigs.k8s.io/kube-network-policies@$VERSION")"
export PATH="$go_bin:$PATH" GOTOOLCHAIN=local
mkdir -p "$BIN"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "Building kube-network-policies $VERSION (first time only, a few minutes)..." >&2
src="$(go mod download -json "sigs.k8s.io/kube-network-policies@$VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
cp -r "$src/." "$work/" && chmod -R u+w "$work"
patch -s -d "$work" -p1 < "$patch_file"
(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$out.tmp" ./cmd)
mv "$out.tmp" "$out"
echo "$stamp" > "$out.stamp"
echo "Built kube-network-policies" >&2
echo "$out"
