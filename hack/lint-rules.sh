#!/usr/bin/env bash
# Proves that lint enforces the architecture's import rules (.golangci.yml, depguard): it plants
# one file per rule that breaks it, runs golangci-lint over those packages and fails unless every
# planted import is reported. Then it enforces that NVIDIA's label, resource and driver names are
# spelled as string literals only in internal/nvidia (hack/nvidialiterals, with its exemptions):
# the tree must hold none elsewhere, and a planted one must be reported. The planted files are
# removed however the script ends.
#
# Not probed: internal/nvidia importing a layer above it. Every such layer imports internal/nvidia,
# so the Go compiler already refuses the import cycle before any linter runs.
set -euo pipefail

cd "$(dirname "$0")/.."
lint=${GOLANGCI_LINT:-hack/tools/bin/golangci-lint}

# package dir | import | what depguard must say (its desc in .golangci.yml)
probes=(
	"internal/planner|k8s.io/client-go/kubernetes|pure decision packages take objects in"
	"internal/planner/placement|sigs.k8s.io/controller-runtime/pkg/client|pure decision packages take objects in"
	"internal/rollout|k8s.io/utils/clock|pure decision packages take the time as an argument"
	"internal/triage|sigs.k8s.io/controller-runtime/pkg/client|pure decision packages take objects in"
	"internal/rightsize|k8s.io/utils/clock|pure decision packages take the time as an argument"
	"controllers|github.com/gpupool/gpupool/internal/sim|the simulated GPU Operator is for cmd/gpusim and tests only"
	"cmd/manager|github.com/gpupool/gpupool/internal/fixture|test fixtures are for _test.go files only"
	"internal/agent|github.com/gpupool/gpupool/internal/testenv|the envtest harness is for _test.go files only"
)

planted=()
cleanup() { rm -f "${planted[@]}"; }
trap cleanup EXIT

dirs=()
for probe in "${probes[@]}"; do
	IFS='|' read -r dir pkg _ <<<"$probe"
	file="$dir/zz_lint_rule_probe.go"
	pkgname=$(go list -f '{{.Name}}' "./$dir")
	printf 'package %s\n\nimport _ "%s"\n' "$pkgname" "$pkg" >"$file"
	planted+=("$file")
	dirs+=("./$dir/")
done

out=$("$lint" run --enable-only depguard "${dirs[@]}" 2>&1 || true)

failed=0
for probe in "${probes[@]}"; do
	IFS='|' read -r dir pkg want <<<"$probe"
	if ! grep -F "$dir/zz_lint_rule_probe.go" <<<"$out" | grep -F "$pkg" | grep -qF "$want"; then
		echo "lint-rules: importing $pkg in $dir is not reported as \"$want\"" >&2
		failed=1
	fi
done
if [ "$failed" -ne 0 ]; then
	echo "golangci-lint said:" >&2
	echo "$out" >&2
	exit 1
fi
echo "lint-rules: all ${#probes[@]} planted import violations reported"

# NVIDIA's names have one home. go run builds the checker, which needs only the standard library.
if ! out=$(go run ./hack/nvidialiterals 2>&1); then
	echo "lint-rules: NVIDIA's names spelled outside internal/nvidia (use its constants):" >&2
	echo "$out" >&2
	exit 1
fi
# The probe spells a label as a literal in a product package, and mentions one in a comment,
# which is fine: only the literal may be reported.
literal_dir=internal/pool
literal_probe="$literal_dir/zz_lint_rule_probe_literal.go"
printf 'package %s\n\n// nvidia.com/gpu.product in a comment is fine.\nconst zzLintRuleProbe = "%s"\n' \
	"$(go list -f '{{.Name}}' "./$literal_dir")" "nvidia.com/mig.config" >"$literal_probe"
planted+=("$literal_probe")
out=$(go run ./hack/nvidialiterals 2>&1 || true)
if ! grep -F "$literal_probe:4:" <<<"$out" | grep -qF '"nvidia.com/mig.config"' ||
	[ "$(grep -cF "$literal_probe" <<<"$out")" -ne 1 ]; then
	echo "lint-rules: the literal planted in $literal_probe is not reported alone; hack/nvidialiterals said:" >&2
	echo "$out" >&2
	exit 1
fi
echo "lint-rules: the planted NVIDIA name literal reported"
