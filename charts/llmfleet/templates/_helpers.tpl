{{/*
Helpers of the llmfleet chart. Every name is prefixed with "llmfleet." so a parent chart's helpers
never collide with them.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "llmfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every object name: fullnameOverride, else "<release>" when the release name already
contains the chart name, else "<release>-<chart>". Truncated to 63 characters (DNS label).
*/}}
{{- define "llmfleet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<chart>-<version>" for the helm.sh/chart label. */}}
{{- define "llmfleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select the operator pods; never change them (Deployment selectors are immutable). */}}
{{- define "llmfleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llmfleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/*
Labels of every object of the chart. Not app.kubernetes.io/managed-by=llmfleet: that value marks
the objects the operator itself creates (engine pods); these objects are managed by Helm.
*/}}
{{- define "llmfleet.labels" -}}
helm.sh/chart: {{ include "llmfleet.chart" . }}
{{ include "llmfleet.selectorLabels" . }}
app.kubernetes.io/part-of: llmfleet
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "llmfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "llmfleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator image reference: repository@digest, or repository:tag (tag defaults to appVersion). */}}
{{- define "llmfleet.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The leader Lease (flag --leader-election-id): one per release, in the release namespace. */}}
{{- define "llmfleet.leaseName" -}}
{{- include "llmfleet.fullname" . -}}
{{- end -}}

{{/*
The operator's --engine-network-policy (JSON): the scrapers and clients of engine.networkPolicy,
and the operator's own pods, which read each engine's KV-cache size for PlanVerified.
*/}}
{{- define "llmfleet.engineNetworkPolicy" -}}
{{- $operator := dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" .Release.Namespace)) "podSelector" (dict "matchLabels" (include "llmfleet.selectorLabels" . | fromYaml)) -}}
{{- dict "scrapers" .Values.engine.networkPolicy.scrapers "clients" .Values.engine.networkPolicy.clients "operator" (list $operator) | toJson -}}
{{- end -}}

{{/* Port of kopf's liveness endpoint (flag --liveness), probed at /healthz. */}}
{{- define "llmfleet.healthPort" -}}8080{{- end -}}

{{/* Where the GPU profiles ConfigMap is mounted (flag --gpu-profiles). */}}
{{- define "llmfleet.gpuProfilesDir" -}}/etc/llmfleet{{- end -}}

{{/*
"true" when a monitoring object should render: its `enabled` is true, or "auto" and the cluster
serves the Prometheus Operator API. Usage: include "llmfleet.monitoringEnabled" (list . "podMonitor")
*/}}
{{- define "llmfleet.monitoringEnabled" -}}
{{- $root := index . 0 -}}
{{- $enabled := toString (index $root.Values.monitoring (index . 1)).enabled -}}
{{- if or (eq $enabled "true") (and (eq $enabled "auto") ($root.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) -}}
true
{{- end -}}
{{- end -}}

{{/*
The RBAC rules of the operator: exactly the verbs and resources it uses, no wildcard. Used by the
ClusterRole (all namespaces) and by each Role (watchNamespaces), so both grant the same.
kopf runs with CRD scanning disabled, so no apiextensions permission is needed.
*/}}
{{- define "llmfleet.operatorRules" -}}
# The resource the operator reconciles: read it, patch kopf's annotations (no finalizers).
- apiGroups: ["llmfleet.dev"]
  resources: ["llmdeployments"]
  verbs: ["get", "list", "watch", "patch"]
# Report the plan and the conditions.
- apiGroups: ["llmfleet.dev"]
  resources: ["llmdeployments/status"]
  verbs: ["get", "patch"]
# The objects the operator creates for each LLMDeployment (server-side apply = patch).
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Multi-node layouts: one LeaderWorkerSet per layout (sigs.k8s.io/lws, a prerequisite only for
# models larger than a node). Watched whether or not the cluster serves it: the operator looks
# the API up again while it is missing, and reports Planned=False LeaderWorkerSetMissing.
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The engines' NetworkPolicy (engine.networkPolicy); watched and pruned whether or not it is on,
# so that turning it off removes the policies it made.
# Scale to zero (autoscaling.minReplicas 0): one KEDA ScaledObject per such LLMDeployment. KEDA
# is a prerequisite for that only: watched whether or not the cluster serves it, like
# LeaderWorkerSets (Planned=False KEDAMissing meanwhile).
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The vLLM Router's identity for its pod discovery. The Role it grants (pods get/list/watch) is
# within what the operator holds below, as Kubernetes requires of anyone creating a Role. Watched
# like every child: the operator reads its children from a watch-fed view.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# LLMBatchJobs: read them, patch kopf's annotations, report progress and conditions.
- apiGroups: ["llmfleet.dev"]
  resources: ["llmbatchjobs"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["llmfleet.dev"]
  resources: ["llmbatchjobs/status"]
  verbs: ["get", "patch"]
# The Indexed Job of each LLMBatchJob (server-side apply when missing; garbage-collected with it;
# deleted when its namespace is, so that its pods cannot hold the namespace in Terminating).
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Engine pod readiness, summarised into the LLMDeployment's status; batch pods' progress.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# Events on the LLMDeployments (kopf posts core/v1 events; events.k8s.io for newer clients).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}

{{/*
Refuse contradictory values with a message naming them. Included by every template that depends
on them, so `helm template`, `helm install` and `helm upgrade` all fail early.
*/}}
{{- define "llmfleet.validate" -}}
{{- with .Values.leaderElection -}}
{{- if not (and (gt (float64 .leaseDurationSeconds) (float64 .renewDeadlineSeconds)) (gt (float64 .renewDeadlineSeconds) (mulf 1.2 (float64 .retryPeriodSeconds)))) -}}
{{- fail (printf "leaderElection needs leaseDurationSeconds > renewDeadlineSeconds > 1.2 x retryPeriodSeconds (got %v, %v, %v): a leader must give the Lease up before a standby may take it." .leaseDurationSeconds .renewDeadlineSeconds .retryPeriodSeconds) -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.metrics.enabled) (eq (toString .Values.monitoring.serviceMonitor.enabled) "true") -}}
{{- fail "monitoring.serviceMonitor.enabled=true needs metrics.enabled=true: the ServiceMonitor scrapes the operator's metrics Service, which metrics.enabled=false removes. Set metrics.enabled=true or monitoring.serviceMonitor.enabled to auto or false." -}}
{{- end -}}
{{- if and (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) -}}
{{- fail "serviceAccount.create=false needs serviceAccount.name: name the existing ServiceAccount the operator runs as, or set serviceAccount.create=true." -}}
{{- end -}}
{{- end -}}
