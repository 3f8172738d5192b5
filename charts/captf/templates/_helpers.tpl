{{/* The chart name. */}}
{{- define "captf.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every resource name: "<release>-<chart>", or the release alone when it contains the chart name. */}}
{{- define "captf.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "captf.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "captf.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: captf
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component; call with (dict "ctx" $ "component" "webhook"). */}}
{{- define "captf.selectorLabels" -}}
app.kubernetes.io/name: {{ include "captf.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Labels of one component's objects; call with (dict "ctx" $ "component" "webhook"). */}}
{{- define "captf.componentLabels" -}}
{{ include "captf.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* An image reference: repository@digest when a digest is set, else repository:tag. */}}
{{- define "captf.image" -}}
{{- if .digest }}
{{- printf "%s@%s" .repository .digest }}
{{- else }}
{{- printf "%s:%s" .repository .tag }}
{{- end }}
{{- end }}

{{- define "captf.webhook.name" -}}
{{- printf "%s-webhook" (include "captf.fullname" .) }}
{{- end }}

{{- define "captf.approver.name" -}}
{{- printf "%s-approver" (include "captf.fullname" .) }}
{{- end }}

{{- define "captf.controller.name" -}}
{{- printf "%s-controller" (include "captf.fullname" .) }}
{{- end }}

{{/*
The namespaces the controller watches, as a JSON list (read it with fromJsonArray): those of
controller.watchNamespaces, then the deprecated controller.watchNamespace, each once; the release
namespace when both are empty; none (every namespace) with controller.watchAllNamespaces, which
fails the render when namespaces are listed too.
*/}}
{{- define "captf.controller.watchNamespaces" -}}
{{- $c := .Values.controller }}
{{- $list := list }}
{{- range (concat ($c.watchNamespaces | default list) (compact (list ($c.watchNamespace | default "")))) }}
{{- if not (has . $list) }}
{{- $list = append $list . }}
{{- end }}
{{- end }}
{{- if $c.watchAllNamespaces }}
{{- if $list }}
{{- fail (printf "controller.watchAllNamespaces=true watches every namespace (a ClusterRoleBinding), but controller.watchNamespaces (or the deprecated controller.watchNamespace) also lists %s: set one or the other" (join ", " $list)) }}
{{- end }}
{{- else if not $list }}
{{- $list = list .Release.Namespace }}
{{- end }}
{{- toJson $list }}
{{- end }}

{{/*
The controller's shards (controller.shards) as a JSON list (read it with fromJsonArray), each
checked: a shard name is the value of the label sharding.captf.io/key and part of its
Deployment's name, so it must be a DNS label (lowercase letters, digits and '-', starting and
ending with a letter or digit), listed once, and short enough that the shard's Deployment and
metrics Service names stay within 63 characters. values.schema.json refuses the first two
already; these messages are for a render without the schema. Fails when
controller.watchLabelSelector is set too: the chart sets every instance's selector itself.
*/}}
{{- define "captf.controller.shards" -}}
{{- $c := .Values.controller }}
{{- $shards := $c.shards | default list }}
{{- if and $shards $c.watchLabelSelector }}
{{- fail (printf "controller.shards sets each controller's --watch-label-selector itself (sharding.captf.io/key=<shard> for a shard, !sharding.captf.io/key for the main one), so controller.watchLabelSelector (%q) cannot be set with it: unset one of them (controller.watchFilter still applies to every shard)" $c.watchLabelSelector) }}
{{- end }}
{{- $longest := sub 63 (len (include "captf.controller.shard.metricsName" (dict "ctx" . "shard" ""))) }}
{{- $seen := list }}
{{- range $shards }}
{{- $name := toString . }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name) }}
{{- fail (printf "controller.shards: %q is not a valid shard name: use lowercase letters, digits and '-', starting and ending with a letter or digit (it is a label value and part of a Deployment name)" $name) }}
{{- end }}
{{- if has $name $seen }}
{{- fail (printf "controller.shards: %q is listed twice: each shard is one Deployment" $name) }}
{{- end }}
{{- if gt (len $name) $longest }}
{{- $names := printf "its Deployment %s and metrics Service %s must stay within Kubernetes' 63 characters" (include "captf.controller.shard.name" (dict "ctx" $ "shard" $name)) (include "captf.controller.shard.metricsName" (dict "ctx" $ "shard" $name)) }}
{{- if lt $longest 1 }}
{{- fail (printf "controller.shards: %q is too long: %s, which no shard name fits with this release name: shorten the release name or set a shorter fullnameOverride" $name $names) }}
{{- end }}
{{- fail (printf "controller.shards: %q is too long: %s, so with this release name a shard name has at most %d characters (or shorten the release name or fullnameOverride)" $name $names $longest) }}
{{- end }}
{{- $seen = append $seen $name }}
{{- end }}
{{- toJson $seen }}
{{- end }}

{{/* A shard's Deployment: "<fullname>-controller-shard-<shard>"; call with (dict "ctx" $ "shard" "a"). */}}
{{- define "captf.controller.shard.name" -}}
{{- printf "%s-shard-%s" (include "captf.controller.name" .ctx) .shard }}
{{- end }}

{{/* A shard's metrics Service; call with (dict "ctx" $ "shard" "a"). */}}
{{- define "captf.controller.shard.metricsName" -}}
{{- printf "%s-metrics" (include "captf.controller.shard.name" .) }}
{{- end }}

{{/*
The component label of a shard's objects. It differs from the main Deployment's "controller":
that Deployment's selector (which Kubernetes never lets change) would otherwise take in the
shards' pods too.
*/}}
{{- define "captf.controller.shard.component" -}}
controller-shard
{{- end }}

{{/* The pod label that tells one shard's pods from another's; call with the shard name. */}}
{{- define "captf.controller.shard.label" -}}
captf.io/shard: {{ . | quote }}
{{- end }}

{{/* The ConfigMap (and Role) of the cluster-wide notification targets. */}}
{{- define "captf.controller.notifications" -}}
{{- printf "%s-notifications" (include "captf.controller.name" .) }}
{{- end }}

{{/* Where the controller reads the cluster-wide notification targets. */}}
{{- define "captf.controller.notificationsDir" -}}
/etc/captf/notifications
{{- end }}

{{/*
A controller Deployment: the main one with (dict "ctx" $), a shard's with
(dict "ctx" $ "shard" "<name>"). Both run the same image, arguments, account and pod settings;
a shard differs in its name, its pod labels and its --watch-label-selector
(sharding.captf.io/key=<name>). With shards, the main one serves the objects of no shard
(!sharding.captf.io/key); without, it serves controller.watchLabelSelector, if set.
*/}}
{{- define "captf.controller.deployment" -}}
{{- $ctx := .ctx }}
{{- $v := $ctx.Values }}
{{- $shard := .shard | default "" }}
{{- $component := "controller" }}
{{- $name := include "captf.controller.name" $ctx }}
{{- $selector := $v.controller.watchLabelSelector }}
{{- if $shard }}
{{- $component = include "captf.controller.shard.component" $ctx }}
{{- $name = include "captf.controller.shard.name" (dict "ctx" $ctx "shard" $shard) }}
{{- $selector = printf "sharding.captf.io/key=%s" $shard }}
{{- else if $v.controller.shards }}
{{- $selector = "!sharding.captf.io/key" }}
{{- end }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "captf.componentLabels" (dict "ctx" $ctx "component" $component) | nindent 4 }}
    {{- if $shard }}
    {{- include "captf.controller.shard.label" $shard | nindent 4 }}
    {{- end }}
spec:
  replicas: {{ $v.controller.replicas }}
  selector:
    matchLabels:
      {{- include "captf.selectorLabels" (dict "ctx" $ctx "component" $component) | nindent 6 }}
      {{- if $shard }}
      {{- include "captf.controller.shard.label" $shard | nindent 6 }}
      {{- end }}
  template:
    metadata:
      labels:
        {{- include "captf.componentLabels" (dict "ctx" $ctx "component" $component) | nindent 8 }}
        {{- if $shard }}
        {{- include "captf.controller.shard.label" $shard | nindent 8 }}
        {{- end }}
      {{- if or $v.controller.podAnnotations $v.notifications.targets }}
      annotations:
        {{- with $v.controller.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- with $v.notifications.targets }}
        # The targets are read at start: a changed list restarts the pods.
        captf.io/notification-targets-checksum: {{ toJson . | sha256sum | quote }}
        {{- end }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "captf.controller.name" $ctx }}
      {{- with $v.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.controller.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $v.podSecurityContext | nindent 8 }}
      # Graceful shutdown: stop taking work, finish the writes in flight.
      terminationGracePeriodSeconds: 30
      containers:
        - name: manager
          image: {{ include "captf.image" $v.controller.image | quote }}
          imagePullPolicy: {{ $v.controller.image.pullPolicy }}
          args:
            - run
            {{- with include "captf.controller.watchNamespaces" $ctx | fromJsonArray }}
            - --namespace={{ join "," . }}
            {{- end }}
            - --runner-service-account-annotations={{ include "captf.pairs" $v.runner.serviceAccount.annotations }}
            - --metrics-addr=0.0.0.0:{{ $v.controller.metricsPort }}
            - --metrics-auth={{ $v.controller.metrics.auth }}
            - --health-addr=0.0.0.0:{{ $v.controller.healthPort }}
            {{- if $v.controller.leaderElect }}
            - --leader-elect
            {{- end }}
            {{- with $selector }}
            - --watch-label-selector={{ . }}
            {{- end }}
            {{- with $v.controller.watchFilter }}
            - --watch-filter={{ . }}
            {{- end }}
            - --concurrency={{ $v.controller.concurrency }}
            - --max-running-jobs={{ int $v.controller.maxRunningJobs.total }}
            - --max-running-jobs-per-namespace={{ int $v.controller.maxRunningJobs.perNamespace }}
            - --log-format={{ $v.controller.logFormat }}
            {{- include "captf.runner.policyArgs" $ctx | nindent 12 }}
            - --runner-requests={{ include "captf.pairs" $v.runner.resources.requests }}
            - --runner-limits={{ include "captf.pairs" $v.runner.resources.limits }}
            - --runner-work-size-limit={{ $v.runner.workSizeLimit }}
            - --runner-tmp-size-limit={{ $v.runner.tmpSizeLimit }}
            - --runner-terraform-cli-config={{ $v.runner.terraformCliConfig.configMapName }}
            - --runner-terraform-cli-config-key={{ $v.runner.terraformCliConfig.key }}
            {{- if $v.planPolicies.configMaps }}
            - --plan-policies-dir=/etc/captf/plan-policies
            {{- end }}
            {{- if $v.notifications.targets }}
            - --notification-targets-file={{ include "captf.controller.notificationsDir" $ctx }}/targets.yaml
            {{- end }}
            - --namespace-notification-targets={{ $v.notifications.namespaceTargets }}
            - --notify-after-failures={{ int $v.notifications.afterFailures }}
          {{- if or $v.planPolicies.configMaps $v.notifications.targets }}
          volumeMounts:
            {{- if $v.planPolicies.configMaps }}
            - name: plan-policies
              mountPath: /etc/captf/plan-policies
              readOnly: true
            {{- end }}
            {{- if $v.notifications.targets }}
            - name: notifications
              mountPath: {{ include "captf.controller.notificationsDir" $ctx }}
              readOnly: true
            {{- end }}
          {{- end }}
          env:
            # The leader-election Lease lives in the controller's own namespace; the holder is the pod.
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
          ports:
            - name: metrics
              containerPort: {{ $v.controller.metricsPort }}
              protocol: TCP
            - name: health
              containerPort: {{ $v.controller.healthPort }}
              protocol: TCP
          readinessProbe:
            httpGet:
              path: /readyz
              port: health
            periodSeconds: 10
          livenessProbe:
            httpGet:
              path: /healthz
              port: health
            initialDelaySeconds: 10
            periodSeconds: 20
          resources:
            {{- toYaml $v.controller.resources | nindent 12 }}
          securityContext:
            {{- toYaml $v.containerSecurityContext | nindent 12 }}
      {{- if or $v.planPolicies.configMaps $v.notifications.targets }}
      volumes:
        {{- if $v.planPolicies.configMaps }}
        # The platform's policies on plans: every key of these ConfigMaps of the release's
        # namespace, in one directory (a key ending in .rego is a policy).
        - name: plan-policies
          projected:
            sources:
              {{- range $v.planPolicies.configMaps }}
              - configMap:
                  name: {{ . }}
              {{- end }}
        {{- end }}
        {{- if $v.notifications.targets }}
        - name: notifications
          configMap:
            name: {{ include "captf.controller.notifications" $ctx }}
        {{- end }}
      {{- end }}
      {{- with $v.controller.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.controller.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.controller.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}

{{/* The Secret holding the webhook's serving certificate (tls.crt, tls.key). */}}
{{- define "captf.webhook.tlsSecret" -}}
{{- if .Values.webhook.tls.certManager.enabled }}
{{- printf "%s-webhook-tls" (include "captf.fullname" .) }}
{{- else }}
{{- required "webhook.tls.existingSecret is required when webhook.tls.certManager.enabled is false" .Values.webhook.tls.existingSecret }}
{{- end }}
{{- end }}

{{/* The serving Certificate, as "<namespace>/<name>" for cert-manager.io/inject-ca-from. */}}
{{- define "captf.webhook.certificate" -}}
{{- printf "%s-webhook" (include "captf.fullname" .) }}
{{- end }}

{{- define "captf.webhook.clientConfig" -}}
{{- $ctx := .ctx }}
clientConfig:
  service:
    name: {{ include "captf.webhook.name" $ctx }}
    namespace: {{ $ctx.Release.Namespace }}
    path: {{ .path }}
    port: {{ $ctx.Values.webhook.service.port }}
  {{- if not $ctx.Values.webhook.tls.certManager.enabled }}
  {{- /* The serving certificate's Secret first: without it no CA helps. */}}
  {{- $_ := include "captf.webhook.tlsSecret" $ctx }}
  caBundle: {{ required "webhook.tls.caBundle is required when webhook.tls.certManager.enabled is false" $ctx.Values.webhook.tls.caBundle }}
  {{- end }}
{{- end }}

{{/* The rules both webhook configurations share: the six kinds, on CREATE and UPDATE. */}}
{{- define "captf.webhook.rules" -}}
rules:
  - apiGroups: ["infrastructure.cluster.x-k8s.io"]
    apiVersions: ["v1beta1"]
    operations: ["CREATE", "UPDATE"]
    resources:
      - terraformclusters
      - terraformmachinepools
      - terraformmachines
      - terraformmachinetemplates
      - terraformclustertemplates
      - terraformmachinepooltemplates
    scope: Namespaced
{{- end }}

{{/* The tenant policy flags the webhook and the controller share (captf-shared's
TenantPolicyArgs, the same in both binaries): the runner image and ServiceAccount the controller
uses when a spec leaves them unset, which a spec may always name, and runner.policy. */}}
{{- define "captf.runner.policyArgs" -}}
- --runner-image={{ include "captf.image" .Values.runner.image }}
- --runner-service-account={{ .Values.runner.serviceAccount.name }}
- --allowed-runner-image-prefixes={{ join "," .Values.runner.policy.allowedImagePrefixes }}
- --allowed-runner-service-accounts={{ join "," .Values.runner.policy.allowedServiceAccounts }}
- --allow-env-from-secrets={{ .Values.runner.policy.allowEnvFromSecrets }}
- --allow-variables-from-secrets={{ .Values.runner.policy.allowVariablesFromSecrets }}
- --allowed-runner-priority-classes={{ join "," .Values.runner.policy.allowedPriorityClasses }}
- --allowed-runner-node-label-keys={{ join "," .Values.runner.policy.allowedNodeLabelKeys }}
- --allow-runner-node-match-fields={{ .Values.runner.policy.allowNodeMatchFields }}
- --allowed-runner-toleration-keys={{ join "," .Values.runner.policy.allowedTolerationKeys }}
- --allow-runner-cross-namespace-pod-affinity={{ .Values.runner.policy.allowCrossNamespacePodAffinity }}
- --allow-approval-never={{ .Values.approvals.allowNever }}
- --max-approvals-required={{ .Values.approvals.maxRequired }}
{{- end }}

{{/* "name=value,..." of a map (sorted by name): resource quantities, annotations. */}}
{{- define "captf.pairs" -}}
{{- $out := list }}
{{- range $k, $v := . }}{{ $out = append $out (printf "%s=%v" $k $v) }}{{ end }}
{{- join "," $out }}
{{- end }}
