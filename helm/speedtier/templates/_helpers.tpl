{{/* ------------------------------------------------------------------------------------------
Names
------------------------------------------------------------------------------------------ */}}

{{- define "speedtier.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "speedtier.fullname" -}}
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

{{/* "<fullname>-<suffix>", kept within 63 characters. Call with (list $ "suffix"). */}}
{{- define "speedtier.componentName" -}}
{{- $root := index . 0 }}
{{- printf "%s-%s" (include "speedtier.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "speedtier.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "speedtier.configMapName" -}}
{{- include "speedtier.fullname" . }}
{{- end }}

{{/* The Secret every container loads: the existing one, or the one the chart creates. */}}
{{- define "speedtier.secretName" -}}
{{- if .Values.secrets.existingSecret }}
{{- .Values.secrets.existingSecret }}
{{- else }}
{{- include "speedtier.fullname" . }}
{{- end }}
{{- end }}

{{- define "speedtier.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "speedtier.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Environment-variable spelling of a tier name: "fast-io" -> "FAST_IO". */}}
{{- define "speedtier.tierEnvName" -}}
{{- . | upper | replace "-" "_" }}
{{- end }}

{{/* ------------------------------------------------------------------------------------------
Labels. Component variants take (dict "root" $ "component" "worker" "tier" "fast"); "tier" is
optional.
------------------------------------------------------------------------------------------ */}}

{{- define "speedtier.selectorLabels" -}}
app.kubernetes.io/name: {{ include "speedtier.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "speedtier.labels" -}}
helm.sh/chart: {{ include "speedtier.chart" . }}
{{ include "speedtier.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: speedtier
{{- end }}

{{- define "speedtier.componentSelectorLabels" -}}
{{ include "speedtier.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- if .tier }}
speedtier.io/tier: {{ .tier }}
{{- end }}
{{- end }}

{{- define "speedtier.componentLabels" -}}
{{ include "speedtier.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- if .tier }}
speedtier.io/tier: {{ .tier }}
{{- end }}
{{- end }}

{{/* ------------------------------------------------------------------------------------------
Settings
------------------------------------------------------------------------------------------ */}}

{{- define "speedtier.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{- define "speedtier.drainSeconds" -}}
{{- $drain := .Values.workerDrainSeconds | int }}
{{- if lt $drain 1 }}
{{- fail "workerDrainSeconds must be at least 1" }}
{{- end }}
{{- $drain }}
{{- end }}

{{/* Worker terminationGracePeriodSeconds: the drain plus a margin for interpreter shutdown. */}}
{{- define "speedtier.workerGraceSeconds" -}}
{{- $margin := .Values.terminationGraceMarginSeconds | int }}
{{- if lt $margin 1 }}
{{- fail "terminationGraceMarginSeconds must be at least 1: the grace period must exceed workerDrainSeconds" }}
{{- end }}
{{- add (include "speedtier.drainSeconds" . | int) $margin }}
{{- end }}

{{/*
The effective settings of one tier, as YAML (read back with fromYaml): workerDefaults overlaid
key by key with the tier's own keys, plus the resolved `keda` and `pdb` sections. Overlaying with
`set` rather than merge/mergeOverwrite keeps explicit false and 0 (e.g. `replicas: 0`).
Call with (dict "root" $ "name" $name "tier" $tier).
*/}}
{{- define "speedtier.tier" -}}
{{- $root := .root }}
{{- $name := .name | toString }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $name) }}
{{- fail (printf "tiers.%s: a tier name must be a lower-case DNS label (a-z, 0-9, '-')" $name) }}
{{- end }}
{{- $t := deepCopy $root.Values.workerDefaults }}
{{- range $key, $value := (.tier | default dict) }}
{{- $_ := set $t $key $value }}
{{- end }}
{{- range $key := list "processes" "threads" }}
{{- if lt (index $t $key | int) 1 }}
{{- fail (printf "tiers.%s.%s must be at least 1" $name $key) }}
{{- end }}
{{- end }}
{{- if lt ($t.replicas | int) 0 }}
{{- fail (printf "tiers.%s.replicas must not be negative" $name) }}
{{- end }}
{{- /* KEDA: global settings, overridden per tier. */}}
{{- $kedaGlobal := $root.Values.keda }}
{{- $kedaTier := $t.keda | default dict }}
{{- $keda := dict "enabled" (and $kedaGlobal.enabled (ternary (index $kedaTier "enabled") true (hasKey $kedaTier "enabled"))) }}
{{- range $key := list "pollingInterval" "cooldownPeriod" "minReplicaCount" "maxReplicaCount" "listLength" "activationListLength" }}
{{- $_ := set $keda $key (ternary (index $kedaTier $key) (index $kedaGlobal $key) (hasKey $kedaTier $key)) }}
{{- end }}
{{- /* Where KEDA reads the tier's lists: keda.redis, replaced key by key by the tier's. */}}
{{- $redis := deepCopy ($kedaGlobal.redis | default dict) }}
{{- $redisTier := index $kedaTier "redis" | default dict }}
{{- range $key, $value := $redisTier }}
{{- $_ := set $redis $key $value }}
{{- end }}
{{- if or (hasKey $redisTier "address") (hasKey $redisTier "addressFromEnv") }}
{{- $_ := set $redis "address" (index $redisTier "address" | default "") }}
{{- $_ := set $redis "addressFromEnv" (index $redisTier "addressFromEnv" | default "") }}
{{- end }}
{{- $_ := set $keda "redis" $redis }}
{{- if and $keda.enabled (empty $t.queues) }}
{{- fail (printf "tiers.%s: KEDA needs the tier's `queues` to scale on" $name) }}
{{- end }}
{{- if and $keda.enabled $t.redisUrl (not (or (index $redisTier "address") (index $redisTier "addressFromEnv"))) }}
{{- fail (printf "tiers.%s has its own Redis (redisUrl): KEDA needs tiers.%s.keda.redis.address (or addressFromEnv) to read its queues there" $name $name) }}
{{- end }}
{{- $_ := set $t "keda" $keda }}
{{- /* PDB: the global budget, replaced field-wise by the tier's. */}}
{{- $_ := set $t "pdb" (include "speedtier.pdbSettings" (list $root $t.pdb) | fromYaml) }}
{{- $_ := set $t "name" $name }}
{{- toYaml $t }}
{{- end }}

{{/*
Resolve a component's PDB override against podDisruptionBudget, as YAML. A component that sets
minAvailable or maxUnavailable replaces both budget fields of the default.
Call with (list $ $override).
*/}}
{{- define "speedtier.pdbSettings" -}}
{{- $global := (index . 0).Values.podDisruptionBudget }}
{{- $override := index . 1 | default dict }}
{{- $enabled := ternary (index $override "enabled") $global.enabled (hasKey $override "enabled") }}
{{- $source := ternary $override $global (or (hasKey $override "minAvailable") (hasKey $override "maxUnavailable")) }}
{{- $pdb := dict "enabled" $enabled }}
{{- if and (hasKey $source "minAvailable") (hasKey $source "maxUnavailable") }}
{{- fail "a PodDisruptionBudget takes minAvailable or maxUnavailable, not both" }}
{{- end }}
{{- if hasKey $source "minAvailable" }}
{{- $_ := set $pdb "minAvailable" (index $source "minAvailable") }}
{{- else }}
{{- $_ := set $pdb "maxUnavailable" (index $source "maxUnavailable" | default 1) }}
{{- end }}
{{- toYaml $pdb }}
{{- end }}

{{/* minAvailable / maxUnavailable lines of a PDB spec from resolved settings. */}}
{{- define "speedtier.pdbBudget" -}}
{{- if hasKey . "minAvailable" }}
minAvailable: {{ include "speedtier.intOrString" (index . "minAvailable") }}
{{- else }}
maxUnavailable: {{ include "speedtier.intOrString" (index . "maxUnavailable") }}
{{- end }}
{{- end }}

{{/* A number printed as an integer (Helm reads numbers as floats), a string such as "50%" quoted. */}}
{{- define "speedtier.intOrString" -}}
{{- if kindIs "string" . }}{{ . | quote }}{{ else }}{{ . | int }}{{ end }}
{{- end }}

{{/* ------------------------------------------------------------------------------------------
ConfigMap and Secret contents (shared by the release objects and the migrations hook copies)
------------------------------------------------------------------------------------------ */}}

{{- define "speedtier.configData" -}}
{{- $c := .Values.config }}
{{- if not (regexMatch "^[A-Za-z0-9_.-]+$" ($c.redisNamespace | toString)) }}
{{- fail "config.redisNamespace may only contain letters, digits, '_', '.' and '-'" }}
{{- end }}
{{- range $key, $rate := $c.windows }}
{{- if not (regexMatch "^[0-9]+/[0-9]+(\\.[0-9]+)?$" ($rate | toString)) }}
{{- fail (printf "config.windows.%s: expected LIMIT/SECONDS such as 4/60, got %v" $key $rate) }}
{{- end }}
{{- end }}
SPEEDTIER_ENV: {{ $c.environment | quote }}
LOG_LEVEL: {{ $c.logLevel | quote }}
SPEEDTIER_LOG_FORMAT: {{ $c.logFormat | default "auto" | quote }}
SPEEDTIER_METRICS_PORT: {{ include "speedtier.metricsPort" . | quote }}
SPEEDTIER_REDIS_NAMESPACE: {{ $c.redisNamespace | quote }}
SPEEDTIER_DATA_DIR: {{ $c.dataDir | quote }}
SPEEDTIER_ALLOW_VOLATILE_REDIS: {{ $c.allowVolatileRedis | default false | toString | quote }}
SPEEDTIER_QUEUE_PREFETCH: {{ $c.queuePrefetch | int | quote }}
SPEEDTIER_WORKER_POLL_MS: {{ $c.workerPollMs | int | quote }}
SPEEDTIER_WORKER_DRAIN_SECONDS: {{ include "speedtier.drainSeconds" . | quote }}
SPEEDTIER_GROUP_LEASE_SECONDS: {{ $c.groupLeaseSeconds | toString | quote }}
SPEEDTIER_HEARTBEAT_TIMEOUT_SECONDS: {{ $c.heartbeatTimeoutSeconds | toString | quote }}
SPEEDTIER_CANCEL_GRACE_SECONDS: {{ $c.cancelGraceSeconds | default 30 | toString | quote }}
SPEEDTIER_MAX_UNSETTLED_RUNS: {{ $c.maxUnsettledRuns | default 3 | int | quote }}
SPEEDTIER_MAX_CLOCK_OFFSET_SECONDS: {{ $c.maxClockOffsetSeconds | default 2 | toString | quote }}
SPEEDTIER_WINDOWS: {{ $c.windows | default dict | toJson | quote }}
SPEEDTIER_FLAGS: {{ $c.flags | default dict | toJson | quote }}
SPEEDTIER_FLAG_CACHE_SECONDS: {{ $c.flagCacheSeconds | toString | quote }}
SPEEDTIER_SEARCH_CACHE_MB: {{ $c.searchCacheMb | toString | quote }}
SPEEDTIER_API_HOST: "0.0.0.0"
SPEEDTIER_API_PORT: {{ .Values.api.port | int | quote }}
SPEEDTIER_API_WORKERS: {{ $c.apiWorkers | int | quote }}
SPEEDTIER_API_MAX_BODY_BYTES: {{ $c.apiMaxBodyBytes | int64 | quote }}
SPEEDTIER_SCHEDULER_MISFIRE_GRACE_SECONDS: {{ $c.schedulerMisfireGraceSeconds | int | quote }}
SPEEDTIER_SCHEDULER_LOCK_SECONDS: {{ $c.schedulerLockSeconds | toString | quote }}
SPEEDTIER_SENTRY_CHECKIN_MARGIN_MINUTES: {{ $c.sentryCheckinMarginMinutes | default 5 | int | quote }}
SPEEDTIER_SENTRY_MAX_RUNTIME_MINUTES: {{ $c.sentryMaxRuntimeMinutes | default 30 | int | quote }}
{{- with $c.otlpEndpoint }}
OTEL_EXPORTER_OTLP_ENDPOINT: {{ . | quote }}
{{- end }}
SPEEDTIER_PROVIDER_URLS: {{ $c.providerUrls | default dict | toJson | quote }}
SPEEDTIER_HTTP_TIMEOUT_SECONDS: {{ $c.httpTimeoutSeconds | toString | quote }}
SPEEDTIER_CRAWL_HOST_RATE: {{ $c.crawlHostRate | quote }}
SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS: {{ $c.crawlAllowPrivateNetworks | toString | quote }}
SPEEDTIER_CRAWL_PRIVATE_NETWORKS_ACKNOWLEDGED: {{ $c.crawlPrivateNetworksAcknowledged | default false | toString | quote }}
SPEEDTIER_AUTH_FAILURE_RATE: {{ $c.authFailureRate | default "20/60" | quote }}
SPEEDTIER_TRUSTED_PROXY_HOPS: {{ $c.trustedProxyHops | default 0 | int | quote }}
SPEEDTIER_INGESTION_TICK_LIMIT: {{ $c.ingestionTickLimit | int | quote }}
SPEEDTIER_INGESTION_TENANT_SLICE: {{ $c.ingestionTenantSlice | int | quote }}
SPEEDTIER_RECRAWL_INTERVAL_SECONDS: {{ $c.recrawlIntervalSeconds | int | quote }}
SPEEDTIER_EGRESS_ALLOWED_NETWORKS: {{ $c.egressAllowedNetworks | default "" | quote }}
SPEEDTIER_RATE_LIMIT_BACKOFF_MAX_SECONDS: {{ $c.rateLimitBackoffMaxSeconds | toString | quote }}
SPEEDTIER_OCR_MAX_PAGES: {{ $c.ocrMaxPages | int | quote }}
SPEEDTIER_OCR_TIMEOUT_SECONDS: {{ $c.ocrTimeoutSeconds | int | quote }}
SPEEDTIER_EMBEDDER: {{ $c.embedder | quote }}
SPEEDTIER_EMBEDDING_API_URL: {{ $c.embeddingApiUrl | quote }}
SPEEDTIER_EMBEDDING_MODEL: {{ $c.embeddingModel | quote }}
SPEEDTIER_EMBEDDING_BATCH_SIZE: {{ $c.embeddingBatchSize | int | quote }}
{{- with $c.embeddingDimensions }}
SPEEDTIER_EMBEDDING_DIMENSIONS: {{ . | int | quote }}
{{- end }}
{{- with $c.embeddingRate }}
SPEEDTIER_EMBEDDING_RATE: {{ . | quote }}
{{- end }}
{{- with $c.embeddingApiProject }}
SPEEDTIER_EMBEDDING_API_PROJECT: {{ . | quote }}
{{- end }}
SPEEDTIER_SLACK_API_URL: {{ $c.slackApiUrl | default "https://slack.com/api/" | quote }}
SPEEDTIER_REPORTS_SLACK_CHANNEL: {{ $c.reportsSlackChannel | default "" | quote }}
{{- with $c.railsInternalUrl }}
RAILS_INTERNAL_URL: {{ . | quote }}
{{- end }}
SPEEDTIER_RAILS_TIMEOUT_SECONDS: {{ $c.railsTimeoutSeconds | default 30 | toString | quote }}
POSTHOG_HOST: {{ $c.posthogHost | default "https://us.i.posthog.com" | quote }}
{{- with $c.posthogProjectApiKey }}
POSTHOG_PROJECT_API_KEY: {{ . | quote }}
{{- end }}
SPEEDTIER_POSTHOG_POLL_SECONDS: {{ $c.posthogPollSeconds | default 30 | toString | quote }}
{{- with $c.region }}
SPEEDTIER_REGION: {{ . | quote }}
{{- end }}
SPEEDTIER_UPLOADS_STORAGE: {{ $c.uploadsStorage | default "s3" | quote }}
SPEEDTIER_UPLOADS_SERVICE_NAME: {{ $c.uploadsServiceName | default "amazon" | quote }}
{{- with $c.uploadsBucket }}
SPEEDTIER_UPLOADS_BUCKET: {{ . | quote }}
{{- end }}
{{- with $c.uploadsEndpointUrl }}
SPEEDTIER_UPLOADS_ENDPOINT_URL: {{ . | quote }}
{{- end }}
{{- with $c.uploadsRegion }}
SPEEDTIER_UPLOADS_REGION: {{ . | quote }}
{{- end }}
{{- with $c.uploadsRoot }}
SPEEDTIER_UPLOADS_ROOT: {{ . | quote }}
{{- end }}
PROVIDER_SYNC_NATIVE_EFFECTS: {{ $c.providerSyncNativeEffects | default "" | quote }}
{{- range $name, $tier := .Values.tiers }}
{{- $t := include "speedtier.tier" (dict "root" $ "name" $name "tier" $tier) | fromYaml }}
{{- if $t.enabled }}
{{ printf "SPEEDTIER_%s_PROCESSES" (include "speedtier.tierEnvName" $name) }}: {{ $t.processes | int | quote }}
{{ printf "SPEEDTIER_%s_THREADS" (include "speedtier.tierEnvName" $name) }}: {{ $t.threads | int | quote }}
{{- end }}
{{- end }}
{{- range $key, $value := $c.extra }}
{{ $key }}: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{- define "speedtier.secretData" -}}
{{- $s := .Values.secrets }}
{{- range $key, $value := dict "REDIS_URL" $s.redisUrl "DATABASE_URL" $s.databaseUrl "INTERNAL_API_TOKEN" $s.internalApiToken "SENTRY_DSN" $s.sentryDsn "SPEEDTIER_EMBEDDING_API_KEY" $s.embeddingApiKey "SLACK_BOT_TOKEN" $s.slackBotToken "RAILS_INTERNAL_TOKEN" $s.railsInternalToken "POSTHOG_PERSONAL_API_KEY" $s.posthogPersonalApiKey "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY" $s.connectorCredentialsKey }}
{{- if $value }}
{{ $key }}: {{ $value | toString | b64enc | quote }}
{{- end }}
{{- end }}
{{- /* Each tier's own Redis, for every pod: the API and other tiers' workers enqueue its jobs. */}}
{{- range $name, $tier := .Values.tiers }}
{{- $t := include "speedtier.tier" (dict "root" $ "name" $name "tier" $tier) | fromYaml }}
{{- with $t.redisUrl }}
{{ printf "SPEEDTIER_%s_REDIS_URL" (include "speedtier.tierEnvName" $name) }}: {{ . | toString | b64enc | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Pod annotations that roll pods when the configuration changes. */}}
{{- define "speedtier.checksumAnnotations" -}}
checksum/config: {{ include "speedtier.configData" . | sha256sum }}
{{- if not .Values.secrets.existingSecret }}
checksum/secret: {{ include "speedtier.secretData" . | sha256sum }}
{{- end }}
{{- end }}

{{/* ------------------------------------------------------------------------------------------
Pod and container building blocks
------------------------------------------------------------------------------------------ */}}

{{/* envFrom of every container. Call with (dict "root" $ "configMap" name "secret" name). */}}
{{- define "speedtier.envFrom" -}}
envFrom:
  - configMapRef:
      name: {{ .configMap }}
  - secretRef:
      name: {{ .secret }}
env:
  # prometheus_client's multiprocess mode: every process of the pod writes its values here,
  # on the /tmp emptyDir (the root filesystem is read-only).
  - name: PROMETHEUS_MULTIPROC_DIR
    value: {{ .root.Values.metrics.multiprocDir | quote }}
{{- with .root.Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "speedtier.containerCommon" -}}
image: {{ include "speedtier.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- with .Values.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumeMounts:
  - name: tmp
    mountPath: /tmp
{{- end }}

{{/* Pod-level settings. Call with (dict "root" $ "component" $componentValues). */}}
{{- define "speedtier.podCommon" -}}
{{- $root := .root }}
{{- $component := .component | default dict }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
automountServiceAccountToken: {{ $root.Values.serviceAccount.automountServiceAccountToken }}
{{- with $root.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (index $component "nodeSelector" | default $root.Values.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (index $component "tolerations" | default $root.Values.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (index $component "affinity" | default $root.Values.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  - name: tmp
    emptyDir:
      {{- with $root.Values.tmpVolume.sizeLimit }}
      sizeLimit: {{ . }}
      {{- else }} {}
      {{- end }}
{{- end }}

{{/* Exec probes of workers and the scheduler: `speedtier ready`. */}}
{{- /*
Probes of a worker pool or the scheduler. Call with (dict "root" $ "component" "worker-fast").
Readiness: `speedtier ready` (Redis and PostgreSQL answer). Liveness: `speedtier alive
<component>` (the process's own heartbeat: consumer threads and pool children running), so a
dependency outage makes pods unready without restarting them.
*/}}
{{- define "speedtier.readyProbes" -}}
readinessProbe:
  exec:
    command: ["speedtier", "ready"]
  {{- toYaml .root.Values.readyProbe.readiness | nindent 2 }}
livenessProbe:
  exec:
    command: ["speedtier", "alive", {{ .component | quote }}]
  {{- toYaml .root.Values.readyProbe.liveness | nindent 2 }}
{{- end }}

{{- define "speedtier.metricsPort" -}}
{{- .Values.metrics.port | default 0 | int -}}
{{- end }}

{{- /* The metrics port of a worker pool or the scheduler (when metrics.port is set). */}}
{{- define "speedtier.metricsContainerPort" -}}
{{- $port := include "speedtier.metricsPort" . | int }}
{{- if $port }}
ports:
  - name: metrics
    containerPort: {{ $port }}
    protocol: TCP
{{- end }}
{{- end }}
