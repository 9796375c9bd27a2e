{{/* Names, labels and derived values shared by every template. */}}

{{- define "tpcmesh.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tpcmesh.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tpcmesh.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels; call with (dict "ctx" $ "component" "agent"). */}}
{{- define "tpcmesh.labels" -}}
helm.sh/chart: {{ include "tpcmesh.chart" .ctx }}
{{ include "tpcmesh.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: tpcmesh
{{- end }}

{{- define "tpcmesh.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tpcmesh.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* A component's resource name: <fullname>-<component>. */}}
{{- define "tpcmesh.componentName" -}}
{{- printf "%s-%s" (include "tpcmesh.fullname" .ctx) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* image reference; call with (dict "ctx" $ "repository" .Values.agent.image). */}}
{{- define "tpcmesh.image" -}}
{{- printf "%s/%s:%s" .ctx.Values.image.registry .repository (default .ctx.Chart.AppVersion .ctx.Values.image.tag) }}
{{- end }}

{{- define "tpcmesh.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (printf "%s-operator" (include "tpcmesh.fullname" .)) .Values.operator.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tpcmesh.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (printf "%s-agent" (include "tpcmesh.fullname" .)) .Values.agent.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The agents' namespace: agent.namespace, else the release's. Created by the site (with its Pod Security level),
     never by the chart. */}}
{{- define "tpcmesh.agent.namespace" -}}
{{- if and .Values.agent.namespace (ne .Values.agent.namespace .Release.Namespace) (eq .Values.certificates.mode "certManager") }}
{{- fail "agent.namespace (agents in a namespace of their own) needs certificates.mode csr or none: with certManager the agents would mount the CA Secret cert-manager writes in the release namespace, which a pod of another namespace cannot" }}
{{- end }}
{{- .Values.agent.namespace | default .Release.Namespace }}
{{- end }}

{{/* "true" when the agents run in a namespace other than the release's, else "". */}}
{{- define "tpcmesh.agent.apart" -}}
{{- if ne (include "tpcmesh.agent.namespace" .) .Release.Namespace }}true{{ end }}
{{- end }}

{{- define "tpcmesh.agent.tokenSecretName" -}}
{{- default (printf "%s-agent-token" (include "tpcmesh.fullname" .)) .Values.agent.token.existingSecret }}
{{- end }}

{{- define "tpcmesh.resultsTokenSecretName" -}}
{{- default (printf "%s-results-token" (include "tpcmesh.fullname" .)) .Values.resultsToken.existingSecret }}
{{- end }}

{{- define "tpcmesh.caSecretName" -}}
{{- default (printf "%s-ca" (include "tpcmesh.fullname" .)) .Values.certificates.caSecretName }}
{{- end }}

{{- define "tpcmesh.dashboard.secretKeySecretName" -}}
{{- default (printf "%s-dashboard-secret-key" (include "tpcmesh.fullname" .)) .Values.dashboard.existingSecretKeySecret }}
{{- end }}

{{- define "tpcmesh.postgresql.secretName" -}}
{{- default (printf "%s-postgresql" (include "tpcmesh.fullname" .)) .Values.database.bundled.existingSecret }}
{{- end }}

{{- define "tpcmesh.postgresql.host" -}}
{{- printf "%s-postgresql" (include "tpcmesh.fullname" .) }}
{{- end }}

{{- define "tpcmesh.dashboard.url" -}}
{{- printf "http://%s-dashboard.%s.svc:%d" (include "tpcmesh.fullname" .) .Release.Namespace (int .Values.dashboard.service.port) }}
{{- end }}

{{/* The operator's default results endpoint: operator.resultsUrl, else this release's dashboard, else none. */}}
{{- define "tpcmesh.operator.resultsUrl" -}}
{{- if .Values.operator.resultsUrl }}{{ .Values.operator.resultsUrl }}
{{- else if .Values.dashboard.enabled }}{{ include "tpcmesh.dashboard.url" . }}
{{- end }}
{{- end }}

{{- define "tpcmesh.caBundleName" -}}
{{- printf "%s-ca-bundle" (include "tpcmesh.fullname" .) }}
{{- end }}

{{/* The chart's cert-manager CA Issuer (mode certManager). */}}
{{- define "tpcmesh.certManager.issuerName" -}}
{{- include "tpcmesh.componentName" (dict "ctx" . "component" "ca-issuer") }}
{{- end }}

{{/* The signer agents request: tpcmesh.io/agent (the operator signs), or the chart's cert-manager CA Issuer. */}}
{{- define "tpcmesh.signerName" -}}
{{- if eq .Values.certificates.mode "certManager" }}
{{- printf "issuers.cert-manager.io/%s.%s" .Release.Namespace (include "tpcmesh.certManager.issuerName" .) }}
{{- else }}
{{- .Values.certificates.signerName }}
{{- end }}
{{- end }}

{{/* The volume `ca` the agents and the operator trust the agents' CA from: the bundle ConfigMap the operator
     publishes (mode csr; optional, it appears on the operator's first start), or only ca.crt of cert-manager's CA
     Secret (mode certManager; the pod waits until cert-manager has issued the CA). */}}
{{- define "tpcmesh.caVolume" -}}
- name: ca
{{- if eq .Values.certificates.mode "certManager" }}
  secret:
    secretName: {{ include "tpcmesh.caSecretName" . }}
    items: [{key: ca.crt, path: ca.crt}]
{{- else }}
  configMap:
    name: {{ include "tpcmesh.caBundleName" . }}
    optional: true
{{- end }}
{{- end }}

{{/* Bytes of the agent's memory-backed data volume (and storage budget) for agent.sizing: one file set served +
     one received, + headroom. */}}
{{- define "tpcmesh.agent.dataBytes" -}}
{{- $fs := .Values.agent.sizing.fileSet }}
{{- $set := mul (int64 $fs.count) (int64 $fs.size) }}
{{- add (mul 2 $set) (int64 .Values.agent.headroomBytes) }}
{{- end }}

{{/* What XRootD's HTTP-TPC buffers for agent.sizing's test (0 without xrootd-https); the agent's own formula is
     XrootdHttpsMover.memory_needed (agent/tpcmesh_agent/movers/xrootd_https.py): per file in flight, up to 16
     blocks of 16 MiB per stream (never more blocks than the file has) with several streams, 16 x 1 MiB with one. */}}
{{- define "tpcmesh.agent.xrootdBufferBytes" -}}
{{- $z := .Values.agent.sizing }}
{{- if has "xrootd-https" .Values.agent.protocols }}
{{- $inFlight := min (int64 $z.concurrency) (int64 $z.fileSet.count) }}
{{- $block := 16777216 }}
{{- if gt (int64 $z.streams) 1 }}
{{- $blocks := min (mul (int64 $z.streams) 16) (div (add (int64 $z.fileSet.size) (sub $block 1)) $block) }}
{{- mul $inFlight $blocks $block }}
{{- else }}
{{- mul $inFlight 16 1048576 }}
{{- end }}
{{- else }}0
{{- end }}
{{- end }}

{{/* The agent container's memory limit unless agent.resources.limits.memory is set: data volume + XRootD buffers +
     the agent's own processes. */}}
{{- define "tpcmesh.agent.memoryLimitBytes" -}}
{{- add (include "tpcmesh.agent.dataBytes" . | int64) (include "tpcmesh.agent.xrootdBufferBytes" . | int64) (int64 .Values.agent.processMemoryBytes) }}
{{- end }}

{{/* A random value that survives upgrades: the existing Secret's key when there is one.
     Call with (dict "ctx" $ "name" "<secret>" "key" "<key>" "length" 40). */}}
{{- define "tpcmesh.keptRandom" -}}
{{- $existing := lookup "v1" "Secret" .ctx.Release.Namespace .name }}
{{- if and $existing (index $existing.data .key) }}
{{- index $existing.data .key }}
{{- else }}
{{- randAlphaNum (int .length) | b64enc }}
{{- end }}
{{- end }}

{{/* Environment of the agent's certificate containers (tpcmesh_agent.csr). */}}
{{- define "tpcmesh.agent.csrEnv" -}}
- name: TPCMESH_AGENT_NODE_NAME
  valueFrom:
    fieldRef: {fieldPath: spec.nodeName}
- name: TPCMESH_AGENT_ADDRESS
  valueFrom:
    fieldRef: {fieldPath: status.podIP}
{{- if .Values.agent.dualStack }}
- name: TPCMESH_AGENT_POD_IPS
  valueFrom:
    fieldRef: {fieldPath: status.podIPs}
{{- end }}
- name: TPCMESH_CSR_SIGNER_NAME
  value: {{ include "tpcmesh.signerName" . | quote }}
- name: TPCMESH_CSR_OUT_DIR
  value: /var/run/tpcmesh/tls
- name: TPCMESH_CSR_LIFETIME_SECONDS
  value: {{ .Values.certificates.hostCertSeconds | int64 | quote }}
- name: TPCMESH_CSR_RENEW_BEFORE_SECONDS
  value: {{ .Values.certificates.renewBeforeSeconds | int64 | quote }}
{{- end }}

{{/* Environment of the dashboard containers: settings and DATABASE_URL. */}}
{{- define "tpcmesh.dashboard.env" -}}
- name: TPCMESH_DASHBOARD_SECRET_KEY
  valueFrom:
    secretKeyRef: {name: {{ include "tpcmesh.dashboard.secretKeySecretName" . }}, key: secret-key}
- name: TPCMESH_DASHBOARD_READ_ACCESS
  value: {{ .Values.dashboard.readAccess | quote }}
- name: TPCMESH_DASHBOARD_ALLOWED_HOSTS
  value: "*"
- name: TPCMESH_DASHBOARD_RETENTION_RAW_DAYS
  value: {{ .Values.dashboard.retention.rawDays | quote }}
- name: TPCMESH_DASHBOARD_RETENTION_FILE_DAYS
  value: {{ .Values.dashboard.retention.fileDays | quote }}
- name: TPCMESH_DASHBOARD_RETENTION_LOSS_DAYS
  value: {{ .Values.dashboard.retention.lossDays | quote }}
{{- if eq .Values.database.mode "external" }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "database.external.existingSecret is required with database.mode=external" .Values.database.external.existingSecret }}
      key: {{ .Values.database.external.key }}
{{- else }}
- name: TPCMESH_POSTGRES_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ include "tpcmesh.postgresql.secretName" . }}, key: password}
- name: DATABASE_URL
  value: {{ printf "postgres://%s:$(TPCMESH_POSTGRES_PASSWORD)@%s:5432/%s" .Values.database.bundled.user (include "tpcmesh.postgresql.host" .) .Values.database.bundled.database | quote }}
{{- end }}
{{- end }}

{{/* Token mode (tokens.mode builtin): on when the chart can set it up alone: an operator that serves the issuer
     and certificates the agents trust it by. Prints "true" or "". */}}
{{- define "tpcmesh.tokens.enabled" -}}
{{- if and (ne .Values.tokens.mode "off") .Values.operator.enabled (ne .Values.certificates.mode "none") }}true{{ end }}
{{- end }}

{{/* The built-in issuer runs (mode builtin, and tokens on). Prints "true" or "". */}}
{{- define "tpcmesh.tokens.builtin" -}}
{{- if and (include "tpcmesh.tokens.enabled" .) (eq .Values.tokens.mode "builtin") }}true{{ end }}
{{- end }}

{{/* The issuer as the agents reach it: the operator's Service (builtin), or the site's (external). */}}
{{- define "tpcmesh.tokens.issuerUrl" -}}
{{- if eq .Values.tokens.mode "external" }}
{{- required "tokens.mode external needs tokens.external.issuer (the site's issuer URL)" .Values.tokens.external.issuer }}
{{- else }}
{{- printf "https://%s.%s.svc:%d" (include "tpcmesh.componentName" (dict "ctx" . "component" "operator")) .Release.Namespace (int .Values.tokens.port) }}
{{- end }}
{{- end }}

{{- define "tpcmesh.tokens.keysSecretName" -}}
{{- .Values.tokens.keysSecretName | default (printf "%s-token-keys" (include "tpcmesh.fullname" .)) }}
{{- end }}

{{- define "tpcmesh.tokens.tlsSecretName" -}}
{{- include "tpcmesh.componentName" (dict "ctx" . "component" "token-issuer-tls") }}
{{- end }}

{{/* The names of the CRDs in crds/ (the hook Job's ClusterRole may touch these only), comma-separated. */}}
{{- define "tpcmesh.crdNames" -}}
{{- $names := list }}
{{- range $path, $_ := .Files.Glob "crds/*.yaml" }}
{{- $names = append $names ($.Files.Get $path | fromYaml).metadata.name }}
{{- end }}
{{- join "," $names }}
{{- end }}

{{/* Annotations of the CRD hook's objects: before install and upgrade, made before the Job (weight), deleted once
it succeeded or before the next attempt (a failed one stays to be read). */}}
{{- define "tpcmesh.crds.hook" -}}
helm.sh/hook: pre-install,pre-upgrade
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/*
The CRD hook Job and its objects: only where this release runs the operator (an archive-only release, the
dashboard alone, has no TransferBenchmarks to upgrade and gets no cluster-scoped RBAC for them).
*/}}
{{- define "tpcmesh.crdsUpgradeJob" -}}
{{- if and .Values.crds.upgradeJob .Values.operator.enabled -}}true{{- end -}}
{{- end }}
