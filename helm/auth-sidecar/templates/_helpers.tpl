{{/* Chart name, truncated to the 63 characters a DNS label allows. */}}
{{- define "auth-sidecar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart, or fullnameOverride; 63 characters at most. */}}
{{- define "auth-sidecar.fullname" -}}
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

{{- define "auth-sidecar.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "auth-sidecar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "auth-sidecar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "auth-sidecar.labels" -}}
helm.sh/chart: {{ include "auth-sidecar.chart" . }}
{{ include "auth-sidecar.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The Secret holding the credentials: the user's, or the one this chart makes. */}}
{{- define "auth-sidecar.secretName" -}}
{{- if .Values.credentials.existingSecret }}
{{- .Values.credentials.existingSecret }}
{{- else }}
{{- printf "%s-credentials" (include "auth-sidecar.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Whether a client secret is mounted (false for a public client). */}}
{{- define "auth-sidecar.hasClientSecret" -}}
{{- if .Values.credentials.existingSecret }}
{{- if .Values.credentials.keys.clientSecret }}true{{ end }}
{{- else if .Values.credentials.clientSecret }}true{{ end }}
{{- end }}

{{/*
The auth-sidecar container, for this chart and for charts that add the
sidecar to their own pods. Call it with a dict:
  sidecar         the sidecar values (image, env, extraEnv, resources, ...; this chart's `sidecar`)
  secretName      the Secret with the credentials
  keys            the keys inside it (username, password, clientSecret; clientSecret "" for none)
  native          true: an init container entry with restartPolicy Always and a startup probe
  followToken     true: readiness follows /readyz
  appVersion      the image tag when sidecar.image.tag is empty
Add the volume from "auth-sidecar.volume" to the pod.
*/}}
{{- define "auth-sidecar.container" -}}
{{- $s := .sidecar }}
{{- $adminPort := int (default 9090 $s.env.ADMIN_PORT) }}
- name: auth-sidecar
  image: "{{ $s.image.repository }}:{{ default .appVersion $s.image.tag }}"
  imagePullPolicy: {{ default "IfNotPresent" $s.image.pullPolicy }}
  {{- if .native }}
  restartPolicy: Always
  {{- end }}
  ports:
    - name: sidecar-proxy
      containerPort: {{ int (default 8080 $s.env.PROXY_PORT) }}
    - name: sidecar-admin
      containerPort: {{ $adminPort }}
  env:
    {{- range $name, $value := $s.env }}
    {{- if ne (toString $value) "" }}
    - name: {{ $name }}
      value: {{ toString $value | quote }}
    {{- end }}
    {{- end }}
    {{- if or (eq (toString $s.env.AUTH_MODE) "basic") (ne (toString $s.env.AUTH_GRANT_TYPE) "client_credentials") }}
    - name: AUTH_USERNAME_FILE
      value: /var/run/secrets/auth-sidecar/{{ .keys.username }}
    - name: AUTH_PASSWORD_FILE
      value: /var/run/secrets/auth-sidecar/{{ .keys.password }}
    {{- end }}
    {{- if .keys.clientSecret }}
    - name: AUTH_CLIENT_SECRET_FILE
      value: /var/run/secrets/auth-sidecar/{{ .keys.clientSecret }}
    {{- end }}
    {{- with $s.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  volumeMounts:
    # A whole-Secret mount (no subPath), so that a rotated Secret reaches the files.
    - name: auth-sidecar-credentials
      mountPath: /var/run/secrets/auth-sidecar
      readOnly: true
    {{- with $s.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if .native }}
  startupProbe:
    httpGet:
      path: /readyz
      port: sidecar-admin
    periodSeconds: 2
    failureThreshold: {{ div (int (default 300 $s.startupTimeoutSeconds)) 2 }}
  {{- end }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: sidecar-admin
    periodSeconds: 10
    failureThreshold: 3
  readinessProbe:
    httpGet:
      path: {{ if .followToken }}/readyz{{ else }}/healthz{{ end }}
      port: sidecar-admin
    periodSeconds: 5
    failureThreshold: 2
  {{- with $s.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $s.securityContext | nindent 4 }}
{{- end }}

{{/* The credentials volume that "auth-sidecar.container" mounts. Call with the Secret's name. */}}
{{- define "auth-sidecar.volume" -}}
- name: auth-sidecar-credentials
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}

{{/* This chart's call of "auth-sidecar.container". */}}
{{- define "auth-sidecar.thisContainer" -}}
{{- $keys := dict "username" .Values.credentials.keys.username "password" .Values.credentials.keys.password "clientSecret" (ternary .Values.credentials.keys.clientSecret "" (eq (include "auth-sidecar.hasClientSecret" .) "true")) }}
{{- include "auth-sidecar.container" (dict "sidecar" .Values.sidecar "secretName" (include "auth-sidecar.secretName" .) "keys" $keys "native" .Values.sidecar.native "followToken" .Values.sidecar.readiness.followToken "appVersion" .Chart.AppVersion) }}
{{- end }}
