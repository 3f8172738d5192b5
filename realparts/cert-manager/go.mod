// Wrapper module: only the files of cert-manager's main module, for its CRDs (deploy/crds),
// which `clusterctl init` needs to find before it installs a provider. cert-manager's commands
// live in their own modules (cmd/controller, cmd/webhook, cmd/cainjector), which the module
// proxy reachable here does not serve, so nothing of it is built.
module captf.local/realparts/cert-manager

go 1.26.0

require github.com/cert-manager/cert-manager v1.21.2
