//go:build tools

// The linters CI runs on the release pipeline's files (scripts/lint-release.sh): actionlint for the
// GitHub workflows, krew's validate-krew-manifest for the kubectl plugin manifest. Pinned here, built
// into target/tools by that script.
package tools

import (
	_ "github.com/rhysd/actionlint/cmd/actionlint"
	_ "sigs.k8s.io/krew/cmd/validate-krew-manifest"
)
