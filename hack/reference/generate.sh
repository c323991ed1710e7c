#!/usr/bin/env bash
# Renders docs/reference from the code, never by hand:
#   api.md                    the Go types in api/ with their kubebuilder markers (crd-ref-docs,
#                             with the templates in hack/reference/api)
#   metrics.md, conditions-and-events.md, README.md
#                             internal/metrics' Exported and the product's packages (hack/reference)
#   cli/*.md                  the commands' help (cobra/doc, cmd/gpupoolctl TestCLIReference)
#
# hack/reference/generate.sh          rewrite docs/reference (make reference)
# hack/reference/generate.sh --check  render into a temporary folder and fail on any difference
#                                     (make verify)
# CRD_REF_DOCS names the crd-ref-docs binary (the Makefile builds it from hack/tools/go.mod).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
GO=${GO:-go}
CRD_REF_DOCS=${CRD_REF_DOCS:-$root/hack/tools/bin/crd-ref-docs}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/reference
mkdir -p "$out/cli"

"$CRD_REF_DOCS" --log-level=ERROR --source-path=api --renderer=markdown \
	--config=hack/reference/api/config.yaml --templates-dir=hack/reference/api/templates \
	--output-path="$out/api.md"
"$GO" run ./hack/reference -out "$out"
"$GO" test -count=1 -run '^TestCLIReference$' ./cmd/gpupoolctl -args -reference-out="$out/cli"

if [[ ${1:-} == --check ]]; then
	if ! diff -ru docs/reference "$out"; then
		echo "docs/reference is not what the code says (diff above: - committed, + generated): run make reference and commit it" >&2
		exit 1
	fi
	exit 0
fi
rm -rf docs/reference
cp -r "$out" docs/reference
