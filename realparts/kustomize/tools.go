//go:build tools

// Keeps the kustomize command in the module graph for `go mod tidy`; never built.
package tools

import (
	_ "sigs.k8s.io/kustomize/kustomize/v5"
)
