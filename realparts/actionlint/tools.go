//go:build tools

// Package tools keeps actionlint's command in the module graph so that go mod tidy records its
// dependencies in go.sum.
package tools

import (
	_ "github.com/rhysd/actionlint/cmd/actionlint"
)
