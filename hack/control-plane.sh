#!/usr/bin/env bash
# Builds the pinned Kubernetes control plane (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager, kubectl) and kwok from Go modules into a cache outside the checkout,
# and writes kwok-stages.yaml next to kwok.
#
# Why build instead of download: nothing but the Go module proxy and Debian's packages can be
# reached here, nor at the air-gapped sites that run gpupool. Each binary is built in a throwaway
# wrapper module, because k8s.io/kubernetes replaces its staging modules with local paths and
# etcd's server module carries replace directives, so neither can be `go install`ed directly.
#
# Usage: hack/control-plane.sh [--print-dir] [component ...]
#   components: etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kwok
#   (default: all). --print-dir prints the cache folder and exits.
#
# kwok-stages.yaml: the standalone kwok binary has no built-in stages and refuses to start
# without them, so the cache carries the ones kwokctl uses by default, concatenated from the kwok
# module's kustomize/stage folder (test/localcluster passes the file to kwok with -c). It is
# written whenever kwok is built, and on its own when only it is missing or from another version.
#
# Environment:
#   GPUPOOL_K8S_CACHE  the folder for the binaries
#                      (default ${XDG_CACHE_HOME:-$HOME/.cache}/gpupool/k8s/<k8s version>)
set -euo pipefail

K8S_VERSION=v1.37.2
K8S_STAGING_VERSION=v0.37.2
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
# kwokctl's default stages (pkg/kwokctl/runtime/cluster.go in kwok): nodes become Ready and keep
# a Lease, pods become Running, complete and are deleted at once. Keep in step with
# kwokStageFiles in test/localcluster/kwok.go, its fallback when this file is missing.
KWOK_STAGE_FILES=(
  node/fast/node-initialize.yaml
  node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  pod/fast/pod-ready.yaml
  pod/fast/pod-complete.yaml
  pod/fast/pod-delete.yaml
)

CACHE_DIR=${GPUPOOL_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool/k8s/${K8S_VERSION}}
ALL=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kwok)

# Minutes measured on a 2-core machine from a cold Go build cache; later binaries reuse
# what the earlier ones compiled, so they are cheaper when built after kube-apiserver.
declare -A MINUTES=([etcd]=3 [kube-apiserver]=11 [kube-scheduler]=3 [kube-controller-manager]=4 [kubectl]=2 [kwok]=2)

log() { printf '[control-plane] %s\n' "$*" >&2; }

if [[ ${1:-} == --print-dir ]]; then
  echo "$CACHE_DIR"
  exit 0
fi

components=("$@")
[[ ${#components[@]} -gt 0 ]] || components=("${ALL[@]}")
for c in "${components[@]}"; do
  [[ -n ${MINUTES[$c]:-} ]] || { log "unknown component '$c'; choose from: ${ALL[*]}"; exit 2; }
done

mkdir -p "$CACHE_DIR"
# One builder at a time per cache: a second `make test` in another clone waits instead of
# racing on the same files.
exec 9>"$CACHE_DIR/.lock"
flock 9

stamp_of() { echo "$CACHE_DIR/.$1.version"; }
version_of() {
  case $1 in
    etcd) echo "$ETCD_VERSION" ;;
    kwok) echo "$KWOK_VERSION" ;;
    *) echo "$K8S_VERSION" ;;
  esac
}

missing=()
for c in "${components[@]}"; do
  if [[ -f $CACHE_DIR/$c && -x $CACHE_DIR/$c && "$(cat "$(stamp_of "$c")" 2>/dev/null)" == "$(version_of "$c")" ]]; then
    continue
  fi
  missing+=("$c")
done

STAGES_FILE=$CACHE_DIR/kwok-stages.yaml
# The first line names the kwok version, so a file left by another version is rewritten.
STAGES_HEADER="# Stage objects of sigs.k8s.io/kwok@$KWOK_VERSION kustomize/stage, written by hack/control-plane.sh"
stages_needed=false
if [[ " ${components[*]} " == *" kwok "* ]]; then
  if [[ " ${missing[*]} " == *" kwok "* || "$(head -n 1 "$STAGES_FILE" 2>/dev/null)" != "$STAGES_HEADER" ]]; then
    stages_needed=true
  fi
fi

if [[ ${#missing[@]} -eq 0 && $stages_needed == false ]]; then
  log "up to date in $CACHE_DIR (${components[*]})"
  exit 0
fi

if [[ ${#missing[@]} -gt 0 ]]; then
  total=0
  for c in "${missing[@]}"; do total=$((total + MINUTES[$c])); done
  log "building ${missing[*]} into $CACHE_DIR"
  log "this happens once per machine and takes about ${total} min on 2 cores from a cold Go cache"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-control-plane.XXXXXX")
trap 'rm -rf "$work"' EXIT
out=$work/out
mkdir -p "$out"
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 GOWORK=off

k8s_ldflags() {
  local minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  local pkg=k8s.io/component-base/version
  echo "-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor" \
       "-X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
}

# A wrapper module requiring k8s.io/kubernetes with every staging module pinned to its
# published version (k8s.io/kubernetes points them at ./staging, which a module cache lacks).
prepare_k8s_module() {
  local dir=$work/k8s
  [[ -f $dir/go.mod ]] && return 0
  mkdir -p "$dir"
  local gomod
  gomod=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [[ -f $gomod ]] || { log "could not read the go.mod of k8s.io/kubernetes@$K8S_VERSION"; exit 1; }
  {
    echo "module gpupool.local/controlplane"
    echo
    echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#replace \1 => \1 '"$K8S_STAGING_VERSION"'#p' "$gomod"
    # godebug settings of the upstream module keep the binaries' runtime behaviour identical.
    sed -n '/^godebug/,/^)/p' "$gomod"
  } >"$dir/go.mod"
}

build_k8s() {
  local name=$1
  prepare_k8s_module
  (cd "$work/k8s" && go build -trimpath -ldflags "$(k8s_ldflags)" -o "$out/$name" "k8s.io/kubernetes/cmd/$name")
}

# quiet runs a command, showing its output only when it fails.
quiet() {
  local out
  if ! out=$("$@" 2>&1); then
    printf '%s\n' "$out" >&2
    return 1
  fi
}

build_etcd() {
  local dir=$work/etcd
  mkdir -p "$dir"
  (cd "$dir" && go mod init gpupool.local/etcd >/dev/null 2>&1 &&
    quiet go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" &&
    go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
}

build_kwok() {
  local dir=$work/kwok
  mkdir -p "$dir"
  (cd "$dir" && go mod init gpupool.local/kwok >/dev/null 2>&1 &&
    quiet go get "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" &&
    go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
      -o "$out/kwok" sigs.k8s.io/kwok/cmd/kwok)
}

# write_kwok_stages concatenates the stage YAMLs from the kwok module in the Go module cache
# (the kwok build has just put it there; otherwise it comes from the module proxy).
write_kwok_stages() {
  local src
  src=$(cd "$work" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p') || true
  if [[ ! -d $src/kustomize/stage ]]; then
    log "could not find sigs.k8s.io/kwok@$KWOK_VERSION in the Go module cache (go mod download printed Dir '$src')"
    exit 1
  fi
  {
    echo "$STAGES_HEADER"
    for f in "${KWOK_STAGE_FILES[@]}"; do
      echo '---'
      cat "$src/kustomize/stage/$f"
    done
  } >"$STAGES_FILE.tmp"
  mv -f "$STAGES_FILE.tmp" "$STAGES_FILE"
}

for c in "${missing[@]}"; do
  start=$(date +%s)
  log "building $c $(version_of "$c") (about ${MINUTES[$c]} min)..."
  case $c in
    etcd) build_etcd ;;
    kwok) build_kwok ;;
    *) build_k8s "$c" ;;
  esac
  # Install atomically so an interrupted build never leaves a half-written binary behind.
  # A folder in the binary's place (left by an older, broken version of this script) would
  # swallow the rename below.
  [[ -d $CACHE_DIR/$c ]] && rm -rf "${CACHE_DIR:?}/$c"
  mv -f "$out/$c" "$CACHE_DIR/$c.tmp"
  mv -f "$CACHE_DIR/$c.tmp" "$CACHE_DIR/$c"
  version_of "$c" >"$(stamp_of "$c")"
  log "built $c in $(( $(date +%s) - start ))s"
done
written=("${missing[@]}")
if [[ $stages_needed == true ]]; then
  log "writing kwok-stages.yaml (kwok $KWOK_VERSION has no built-in stages)..."
  write_kwok_stages
  written+=(kwok-stages.yaml)
fi
log "done: ${written[*]} in $CACHE_DIR"
