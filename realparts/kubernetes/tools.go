//go:build tools

// Package tools keeps the built commands in the module graph so that go mod tidy records
// their dependencies in go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
