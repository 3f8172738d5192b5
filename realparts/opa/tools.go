//go:build tools

// Package tools keeps OPA's command (the module root's main package) in the module graph so that
// go mod tidy records its dependencies in go.sum.
package tools

import (
	_ "github.com/open-policy-agent/opa"
)
