#!/usr/bin/env bash
# Makes this Debian host ready to build gpupool's images for the given architectures
# (`make images` runs it): Debian's package lists for each architecture, for the agent's
# base layer (skipped when AGENT_BASE names another base), and a C cross compiler for each
# architecture other than the host's, because the agent needs cgo. As root it installs what
# is missing with apt; otherwise it stops and prints the command to run.
# With --optional (make test) it never fails: what it cannot set up is reported, and the
# tests that need it are skipped.
set -euo pipefail

optional=false
if [[ ${1:-} == --optional ]]; then optional=true; shift; fi
(($#)) || set -- amd64 arm64

say() { echo "make images: $*" >&2; }
need() { # need WHAT COMMAND: run COMMAND as root, or stop and print it
	if [[ $(id -u) != 0 ]]; then
		$optional && { say "$1 is missing (as root: $2); the tests that need it are skipped"; return 1; }
		say "$1 is missing; run as root:  $2"; exit 1
	fi
	say "$1 is missing; running: $2"
	bash -c "$2" >&2 && return 0
	say "'$2' failed"
	$optional && return 1
	exit 1
}

if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
	if [[ -n ${AGENT_BASE:-} ]]; then
		say "no apt-get: building only with AGENT_BASE=$AGENT_BASE"
	elif $optional; then
		say "no apt-get and dpkg (not a Debian host): the agent image tests are skipped"; exit 0
	else
		say "the agent image's base is unpacked from Debian packages, which needs apt-get and dpkg (a Debian host); elsewhere set AGENT_BASE to an OCI layout of a glibc base image"
		exit 1
	fi
fi

# pinned_offered ARCH: apt's lists offer every version debian.lock pins for ARCH.
lock="$(dirname "$0")/debian.lock"
pinned_offered() {
	local pkg arch version _
	while read -r pkg arch version _; do
		[[ -z $pkg || $pkg == \#* || $arch != "$1" ]] && continue
		# apt-cache show exits 0 for a version it does not know, printing nothing.
		[[ -n $(apt-cache show "$pkg:$arch=$version" 2>/dev/null) ]] || return 1
	done <"$lock"
	return 0
}

host=$(dpkg --print-architecture 2>/dev/null || go env GOHOSTARCH)
updated=false
for arch; do
	case $arch in
	amd64) triplet=x86_64-linux-gnu ;;
	arm64) triplet=aarch64-linux-gnu ;;
	*) say "unsupported architecture $arch (amd64 or arm64)"; exit 1 ;;
	esac
	if [[ -z ${AGENT_BASE:-} ]]; then
		if [[ $arch != "$host" ]] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
			need "Debian's $arch architecture" "dpkg --add-architecture $arch && apt-get update -q" || continue
			updated=true
		fi
		if ! apt-cache show "libc6:$arch" >/dev/null 2>&1; then
			if $updated; then say "apt offers no libc6:$arch even after apt-get update"; $optional && continue; exit 1; fi
			need "Debian's package lists" "apt-get update -q" || continue
			updated=true
		fi
		# The versions debian.lock pins must be in the lists: lists older than the lock (a
		# machine whose image was made before Debian's last point release) lack them.
		if ! pinned_offered "$arch"; then
			if $updated; then
				say "apt offers not every $arch package version debian.lock pins, even after apt-get update: Debian no longer serves one; update the pins (go -C hack/images run . lock) and commit debian.lock"
				$optional && continue
				exit 1
			fi
			need "package lists that offer debian.lock's $arch versions" "apt-get update -q" || continue
			updated=true
		fi
	fi
	if [[ $arch != "$host" ]]; then
		# The compiler and the target's C library headers (only recommended by the compiler).
		if [[ -z $(printenv "CC_$arch" || true) ]] &&
			{ ! command -v "${triplet}-gcc" >/dev/null || [[ ! -e /usr/$triplet/include/stdio.h ]]; }; then
			need "the C cross compiler ${triplet}-gcc with $arch's C library (the agent needs cgo)" \
				"apt-get install -y -q --no-install-recommends gcc-${triplet//_/-} libc6-dev-$arch-cross" || continue
		fi
	fi
done
exit 0
