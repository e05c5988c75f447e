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

{{/*
Whether this chart renders its own application with the sidecar beside it:
anything but app.enabled false does, as values.schema.json then requires
the application's values.
*/}}
{{- define "auth-sidecar.appEnabled" -}}
{{- if ne (toString .Values.app.enabled) "false" }}true{{ end }}
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

{{/* Whether a private key (private_key_jwt) is mounted. */}}
{{- define "auth-sidecar.hasClientKey" -}}
{{- if .Values.credentials.existingSecret }}
{{- if and .Values.credentials.keys.clientKey (eq (toString .Values.sidecar.env.AUTH_CLIENT_AUTH) "private_key_jwt") }}true{{ end }}
{{- else if .Values.credentials.clientKey }}true{{ end }}
{{- end }}

{{/* Whether the user's credentials (user name and password) are needed: the password grant, or basic mode. */}}
{{- define "auth-sidecar.hasUser" -}}
{{- if or (eq (toString .Values.sidecar.env.AUTH_MODE) "basic") (ne (toString .Values.sidecar.env.AUTH_GRANT_TYPE) "client_credentials") }}true{{ end }}
{{- end }}

{{/* Whether the client authenticates by the mounted certificate (tls_client_auth, self_signed_tls_client_auth): it needs no secret. */}}
{{- define "auth-sidecar.certificateAuth" -}}
{{- if has (toString .Values.sidecar.env.AUTH_CLIENT_AUTH) (list "tls_client_auth" "self_signed_tls_client_auth") }}
{{- if not (and .Values.tls.auth (or .Values.tls.existingSecret .Values.tls.csi)) }}
{{- fail (printf "AUTH_CLIENT_AUTH %s needs the client certificate presented to the auth server: tls.existingSecret or tls.csi, with tls.auth=true" (toString .Values.sidecar.env.AUTH_CLIENT_AUTH)) }}
{{- end }}true
{{- end }}
{{- end }}

{{/*
Whether a Secret is mounted at all: not when the projected service-account
token is the only credential (client_credentials with federated_jwt).
*/}}
{{- define "auth-sidecar.usesSecret" -}}
{{- if or .Values.credentials.existingSecret (include "auth-sidecar.hasUser" .) (include "auth-sidecar.hasClientSecret" .) (include "auth-sidecar.hasClientKey" .) }}true{{ end }}
{{- end }}

{{/*
The auth-sidecar container, for this chart and for charts that add the
sidecar to their own pods. Call it with a dict:
  sidecar         the sidecar values (image, env, extraEnv, resources, ...; this chart's `sidecar`)
  secretName      the Secret with the credentials
  keys            the keys inside it (username, password, clientSecret, clientKey; "" for none;
                  username and password "" when the user's credentials are not used)
  projectedToken  the projected service-account token's settings (enabled, audience, expirationSeconds)
  native          true: an init container entry with restartPolicy Always and a startup probe
  followToken     true: readiness follows /readyz
  appVersion      the image tag when sidecar.image.tag is empty
  routes          the named routes (this chart's `routes`), rendered as ROUTE_<NAME>_* variables
  tls             a client certificate (this chart's `tls`): its files, and which way it goes
  forwardProxy    the forward proxy (this chart's `forwardProxy`): FORWARD_PROXY_* and the CA's mount
  tracing         OpenTelemetry tracing (this chart's `tracing`): the SDK's OTEL_* variables
  configMap       the ConfigMap holding config.yaml (CONFIG_FILE), mounted whole; "" for none
  config          the settings in it (this chart's `config`), which sidecar.env then leaves out
Add the volume from "auth-sidecar.volume" to the pod, and give the application
"auth-sidecar.forwardProxyAppEnv" and "auth-sidecar.forwardProxyAppVolumeMounts".
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
  {{- $projected := and .projectedToken .projectedToken.enabled }}
  env:
    {{- $file := default (dict) .config }}
    {{- range $name, $value := $s.env }}
    {{- /* a setting the config file holds is the file's: the environment would win over it */}}
    {{- if and (ne (toString $value) "") (not (and $projected (eq $name "AUTH_CLIENT_AUTH"))) (not (hasKey $file $name)) }}
    - name: {{ $name }}
      value: {{ toString $value | quote }}
    {{- end }}
    {{- end }}
    {{- if .keys.username }}
    - name: AUTH_USERNAME_FILE
      value: /var/run/secrets/auth-sidecar/{{ .keys.username }}
    - name: AUTH_PASSWORD_FILE
      value: /var/run/secrets/auth-sidecar/{{ .keys.password }}
    {{- end }}
    {{- if .keys.clientSecret }}
    - name: AUTH_CLIENT_SECRET_FILE
      value: /var/run/secrets/auth-sidecar/{{ .keys.clientSecret }}
    {{- end }}
    {{- if .keys.clientKey }}
    - name: AUTH_CLIENT_KEY_FILE
      value: /var/run/secrets/auth-sidecar/{{ .keys.clientKey }}
    {{- end }}
    {{- if $projected }}
    - name: AUTH_CLIENT_AUTH
      value: federated_jwt
    - name: AUTH_CLIENT_ASSERTION_FILE
      value: /var/run/secrets/auth-sidecar-token/token
    {{- end }}
    {{- include "auth-sidecar.routeEnv" .routes | nindent 4 }}
    {{- include "auth-sidecar.tlsEnv" .tls | nindent 4 }}
    {{- with include "auth-sidecar.forwardProxyEnv" (dict "forwardProxy" .forwardProxy "env" $s.env "routes" .routes) | trim }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- with include "auth-sidecar.tracingEnv" .tracing | trim }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- if .configMap }}
    - name: CONFIG_FILE
      value: /etc/auth-sidecar/config/config.yaml
    {{- end }}
    {{- with $s.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  volumeMounts:
    {{- if .configMap }}
    # The whole ConfigMap (no subPath): an update reaches the file, which the sidecar re-reads and applies.
    - name: auth-sidecar-config
      mountPath: /etc/auth-sidecar/config
      readOnly: true
    {{- end }}
    {{- if .secretName }}
    # A whole-Secret mount (no subPath), so that a rotated Secret reaches the files.
    - name: auth-sidecar-credentials
      mountPath: /var/run/secrets/auth-sidecar
      readOnly: true
    {{- end }}
    {{- if $projected }}
    # The kubelet replaces the token before it expires; the sidecar reads the new one.
    - name: auth-sidecar-token
      mountPath: /var/run/secrets/auth-sidecar-token
      readOnly: true
    {{- end }}
    {{- if and .tls (or .tls.existingSecret .tls.csi) }}
    # The whole volume (no subPath): renewed files reach the sidecar, which reads them again.
    - name: auth-sidecar-tls
      mountPath: /var/run/secrets/auth-sidecar-tls
      readOnly: true
    {{- end }}
    {{- range .routes }}
    {{- if .existingSecret }}
    - name: auth-sidecar-route-{{ lower .name | replace "_" "-" }}
      mountPath: /var/run/secrets/auth-sidecar-routes/{{ lower .name }}
      readOnly: true
    {{- end }}
    {{- end }}
    {{- if and .forwardProxy .forwardProxy.enabled .forwardProxy.ca.secretName }}
    # The whole Secret (no subPath): a renewed CA reaches the sidecar, which reads it again.
    - name: auth-sidecar-forward-ca
      mountPath: /var/run/secrets/auth-sidecar-forward-ca
      readOnly: true
    {{- end }}
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

{{/*
The volumes that "auth-sidecar.container" mounts. Call with a dict:
secretName (the Secret with the credentials, "" for none),
projectedToken, routes, tls, forwardProxy and configMap (as for the container). With
forwardProxy, also the application's volume of the CA's certificate alone,
which "auth-sidecar.forwardProxyAppVolumeMounts" mounts.
*/}}
{{- define "auth-sidecar.volume" -}}
{{- if .configMap }}
- name: auth-sidecar-config
  configMap:
    name: {{ .configMap }}
{{- end }}
{{- if and .forwardProxy .forwardProxy.enabled }}
{{- with .forwardProxy }}
{{- if .ca.secretName }}
- name: auth-sidecar-forward-ca
  secret:
    secretName: {{ .ca.secretName }}
    defaultMode: 0440
{{- end }}
{{- /* The application's: the certificate only, never the key; no subPath, so a renewal reaches it. */}}
{{- if .caBundle.configMap }}
- name: auth-sidecar-forward-ca-bundle
  configMap:
    name: {{ .caBundle.configMap }}
    items:
      - key: {{ .caBundle.configMapKey }}
        path: ca.crt
    defaultMode: 0444
{{- else if .ca.secretName }}
- name: auth-sidecar-forward-ca-bundle
  secret:
    secretName: {{ .ca.secretName }}
    items:
      - key: {{ .ca.certKey }}
        path: ca.crt
    defaultMode: 0444
{{- end }}
{{- end }}
{{- end }}
{{- with .tls }}
{{- if .existingSecret }}
- name: auth-sidecar-tls
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0440
{{- else if .csi }}
- name: auth-sidecar-tls
  csi:
    {{- toYaml .csi | nindent 4 }}
{{- end }}
{{- end }}
{{- range .routes }}
{{- if .existingSecret }}
- name: auth-sidecar-route-{{ lower .name | replace "_" "-" }}
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end }}
{{- if .secretName }}
- name: auth-sidecar-credentials
  secret:
    secretName: {{ .secretName }}
    defaultMode: 0440
{{- end }}
{{- if and .projectedToken .projectedToken.enabled }}
- name: auth-sidecar-token
  projected:
    sources:
      - serviceAccountToken:
          path: token
          audience: {{ required "credentials.projectedToken.audience is required: the realm's issuer URL" .projectedToken.audience | quote }}
          expirationSeconds: {{ int .projectedToken.expirationSeconds }}
{{- end }}
{{- end }}

{{/* The Secret this chart's pod mounts, or "" when it needs none. */}}
{{- define "auth-sidecar.mountedSecret" -}}
{{- if include "auth-sidecar.usesSecret" . }}{{ include "auth-sidecar.secretName" . }}{{ end }}
{{- end }}

{{/* This chart's call of "auth-sidecar.container". */}}
{{- define "auth-sidecar.thisContainer" -}}
{{- $user := eq (include "auth-sidecar.hasUser" .) "true" }}
{{- $keys := dict
  "username" (ternary .Values.credentials.keys.username "" $user)
  "password" (ternary .Values.credentials.keys.password "" $user)
  "clientSecret" (ternary .Values.credentials.keys.clientSecret "" (eq (include "auth-sidecar.hasClientSecret" .) "true"))
  "clientKey" (ternary .Values.credentials.keys.clientKey "" (eq (include "auth-sidecar.hasClientKey" .) "true")) }}
{{- include "auth-sidecar.container" (dict "sidecar" .Values.sidecar "secretName" (include "auth-sidecar.mountedSecret" .) "keys" $keys "projectedToken" .Values.credentials.projectedToken "native" .Values.sidecar.native "followToken" .Values.sidecar.readiness.followToken "appVersion" .Chart.AppVersion "routes" .Values.routes "tls" .Values.tls "forwardProxy" .Values.forwardProxy "tracing" .Values.tracing "configMap" (include "auth-sidecar.configMap" .) "config" .Values.config) }}
{{- end }}

{{/* The ConfigMap of the `config` value, or "" when it is empty. */}}
{{- define "auth-sidecar.configMap" -}}
{{- if .Values.config }}{{ include "auth-sidecar.fullname" . }}-config{{ end }}
{{- end }}

{{/*
The variables of the named routes: ROUTE_<NAME>_BASE_URL, _PATH or _PORT,
_AUTH_<X> for each of its auth settings, the exchange's audience and scope,
and the files of its own Secret (mounted by "auth-sidecar.container").
*/}}
{{- define "auth-sidecar.routeEnv" -}}
{{- $files := dict "username" "USERNAME_FILE" "password" "PASSWORD_FILE" "clientSecret" "CLIENT_SECRET_FILE" "clientKey" "CLIENT_KEY_FILE" }}
{{- range . }}
{{- $route := printf "ROUTE_%s" (upper .name) }}
- name: {{ $route }}_BASE_URL
  value: {{ .baseUrl | quote }}
{{- if .path }}
- name: {{ $route }}_PATH
  value: {{ .path | quote }}
{{- else }}
- name: {{ $route }}_PORT
  value: {{ .port | toString | quote }}
{{- end }}
{{- range $setting, $value := .auth }}
- name: {{ $route }}_AUTH_{{ $setting }}
  value: {{ toString $value | quote }}
{{- end }}
{{- with .exchange }}
- name: {{ $route }}_AUTH_EXCHANGE_AUDIENCE
  value: {{ .audience | quote }}
{{- if .scope }}
- name: {{ $route }}_AUTH_EXCHANGE_SCOPE
  value: {{ .scope | quote }}
{{- end }}
{{- end }}
{{- if .existingSecret }}
{{- $dir := printf "/var/run/secrets/auth-sidecar-routes/%s" (lower .name) }}
{{- range $key, $file := .keys }}
{{- if $file }}
- name: {{ $route }}_AUTH_{{ get $files $key }}
  value: {{ printf "%s/%s" $dir $file | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The variables of the client certificate (this chart's `tls`): its files in
the mounted volume, for the upstream (UPSTREAM_TLS_*) and the auth server
(AUTH_TLS_*) as `upstream` and `auth` say.
*/}}
{{- define "auth-sidecar.tlsEnv" -}}
{{- if and . (or .existingSecret .csi) }}
{{- $tls := . }}
{{- range $way := list "UPSTREAM" "AUTH" }}
{{- if get $tls (lower $way) }}
- name: {{ $way }}_TLS_CERT_FILE
  value: /var/run/secrets/auth-sidecar-tls/{{ $tls.files.cert }}
- name: {{ $way }}_TLS_KEY_FILE
  value: /var/run/secrets/auth-sidecar-tls/{{ $tls.files.key }}
{{- if $tls.files.ca }}
- name: {{ $way }}_TLS_CA_FILE
  value: /var/run/secrets/auth-sidecar-tls/{{ $tls.files.ca }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The OpenTelemetry SDK's variables (this chart's `tracing`), when enabled:
the exporter and its endpoint, the sampler, the service's name, and the
resource attributes, which start with the pod's name and namespace from the
downward API (Kubernetes expands $(VAR) of the entries before). Nothing when
disabled: the sidecar then does not load the SDK at all. Call with tracing.
*/}}
{{- define "auth-sidecar.tracingEnv" -}}
{{- if and . .enabled }}
{{- $exporter := default "otlp" .exporter }}
- name: OTEL_TRACES_EXPORTER
  value: {{ $exporter | quote }}
{{- with .endpoint }}
- name: {{ ternary "OTEL_EXPORTER_ZIPKIN_ENDPOINT" "OTEL_EXPORTER_OTLP_ENDPOINT" (eq $exporter "zipkin") }}
  value: {{ . | quote }}
{{- end }}
{{- with .sampler }}
- name: OTEL_TRACES_SAMPLER
  value: {{ . | quote }}
{{- end }}
{{- /* only the ratio samplers take an argument */}}
{{- if and (hasSuffix "traceidratio" (toString .sampler)) (ne (toString .samplerArg) "") }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ toString .samplerArg | quote }}
{{- end }}
{{- with .serviceName }}
- name: OTEL_SERVICE_NAME
  value: {{ . | quote }}
{{- end }}
- name: K8S_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: K8S_NAMESPACE_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- $attributes := list "k8s.pod.name=$(K8S_POD_NAME)" "k8s.namespace.name=$(K8S_NAMESPACE_NAME)" }}
{{- range $key, $value := .resourceAttributes }}
{{- $attributes = append $attributes (printf "%s=%s" (include "auth-sidecar.resourceAttributeText" $key) (include "auth-sidecar.resourceAttributeText" $value)) }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attributes | quote }}
{{- end }}
{{- end }}

{{/*
A key or value of OTEL_RESOURCE_ATTRIBUTES, percent-encoded where it must
be: one unencoded "," or "=" makes the SDK drop every attribute, the
service's name included. "$" too, so that Kubernetes expands nothing of
it, and spaces, which the SDK would trim at either end.
*/}}
{{- define "auth-sidecar.resourceAttributeText" -}}
{{- toString . | replace "%" "%25" | replace "," "%2C" | replace "=" "%3D" | replace "$" "%24" | replace " " "%20" }}
{{- end }}

{{/*
The address the application reaches the forward proxy at: PROXY_HOST, which
must be loopback, since whoever reaches the proxy is lent the pod's
credentials. Call with the sidecar's env.
*/}}
{{- define "auth-sidecar.forwardProxyHost" -}}
{{- $host := toString (default "127.0.0.1" .PROXY_HOST) }}
{{- if not (or (hasPrefix "127." $host) (eq $host "::1") (eq $host "localhost")) }}
{{- fail (printf "forwardProxy needs sidecar.env.PROXY_HOST on loopback (127.0.0.1 or ::1), not %s: whoever reaches the forward proxy is lent the pod's credentials" $host) }}
{{- end }}
{{- $host }}
{{- end }}

{{/* The application's HTTPS_PROXY: http://<PROXY_HOST>:<port>. Call with a dict: forwardProxy and env (the sidecar's). */}}
{{- define "auth-sidecar.forwardProxyUrl" -}}
{{- $host := include "auth-sidecar.forwardProxyHost" .env }}
{{- printf "http://%s:%d" (ternary (printf "[%s]" $host) $host (contains ":" $host)) (int .forwardProxy.port) }}
{{- end }}

{{/*
The sidecar's FORWARD_PROXY_* variables. Call with a dict: forwardProxy, env
(the sidecar's) and routes. Refuses an https upstream without the CA, which
the sidecar would refuse at start.
*/}}
{{- define "auth-sidecar.forwardProxyEnv" -}}
{{- $f := .forwardProxy }}
{{- if and $f $f.enabled }}
{{- $_ := include "auth-sidecar.forwardProxyHost" .env }}
{{- if not $f.ca.secretName }}
{{- $https := list }}
{{- if hasPrefix "https://" (lower (toString .env.BASE_URL)) }}{{ $https = append $https "BASE_URL" }}{{ end }}
{{- range .routes }}
{{- if hasPrefix "https://" (lower (toString .baseUrl)) }}{{ $https = append $https (printf "route %s" .name) }}{{ end }}
{{- end }}
{{- with $https }}
{{- fail (printf "forwardProxy.ca.secretName is required: an https upstream (%s) needs the CA that signs the certificates the forward proxy shows the application for its host" (join ", " .)) }}
{{- end }}
{{- end }}
- name: FORWARD_PROXY_PORT
  value: {{ int $f.port | toString | quote }}
{{- if $f.ca.secretName }}
- name: FORWARD_PROXY_CA_CERT_FILE
  value: /var/run/secrets/auth-sidecar-forward-ca/{{ $f.ca.certKey }}
- name: FORWARD_PROXY_CA_KEY_FILE
  value: /var/run/secrets/auth-sidecar-forward-ca/{{ $f.ca.keyKey }}
{{- end }}
{{- with $f.allow }}
- name: FORWARD_PROXY_ALLOW
  value: {{ join "," . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The application's side of the forward proxy: the proxy variables in both
cases, NO_PROXY, the CA bundle's variables and, when asked, the JVM's proxy
properties. Call with a dict: forwardProxy and env (the sidecar's).
*/}}
{{- define "auth-sidecar.forwardProxyAppEnv" -}}
{{- $f := .forwardProxy }}
{{- if and $f $f.enabled }}
{{- $host := include "auth-sidecar.forwardProxyHost" .env }}
{{- $url := include "auth-sidecar.forwardProxyUrl" . }}
{{- range list "HTTPS_PROXY" "HTTP_PROXY" "https_proxy" "http_proxy" }}
- name: {{ . }}
  value: {{ $url | quote }}
{{- end }}
{{- with $f.noProxy }}
- name: NO_PROXY
  value: {{ . | quote }}
- name: no_proxy
  value: {{ . | quote }}
{{- end }}
{{- if include "auth-sidecar.forwardProxyAppVolumeMounts" $f }}
{{- range $f.caBundle.variables }}
- name: {{ . }}
  value: /etc/auth-sidecar-forward-ca/ca.crt
{{- end }}
{{- end }}
{{- if $f.javaToolOptions }}
{{- /* NO_PROXY's forms in Java's: .domain is *.domain, IPv6 is bracketed; a CIDR has none */}}
{{- $nonProxy := list }}
{{- range splitList "," (toString $f.noProxy) }}
{{- $entry := trim . }}
{{- if and $entry (not (contains "/" $entry)) }}
{{- $nonProxy = append $nonProxy (ternary (printf "*%s" $entry) (ternary (printf "[%s]" $entry) $entry (contains ":" $entry)) (hasPrefix "." $entry)) }}
{{- end }}
{{- end }}
{{- $options := list (printf "-Dhttps.proxyHost=%s -Dhttps.proxyPort=%d -Dhttp.proxyHost=%s -Dhttp.proxyPort=%d" $host (int $f.port) $host (int $f.port)) }}
{{- with $nonProxy }}{{ $options = append $options (printf "-Dhttp.nonProxyHosts=%s" (join "|" .)) }}{{ end }}
- name: JAVA_TOOL_OPTIONS
  value: {{ join " " $options | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The application's mount of the forward CA's certificate (or the combined
bundle of caBundle.configMap), from "auth-sidecar.volume". Call with
forwardProxy.
*/}}
{{- define "auth-sidecar.forwardProxyAppVolumeMounts" -}}
{{- if and . .enabled (or .caBundle.configMap .ca.secretName) }}
- name: auth-sidecar-forward-ca-bundle
  mountPath: /etc/auth-sidecar-forward-ca
  readOnly: true
{{- end }}
{{- end }}

{{/* The injector's objects' name: <fullname>-injector, 63 characters at most. */}}
{{- define "auth-sidecar.injector.fullname" -}}
{{- printf "%s-injector" (include "auth-sidecar.fullname" . | trunc 54 | trimSuffix "-") }}
{{- end }}

{{/*
The injector's pods' labels: a name of their own, so that the
application's selector (and its Service) never takes them in.
*/}}
{{- define "auth-sidecar.injector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "auth-sidecar.name" . | trunc 54 | trimSuffix "-" }}-injector
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: injector
{{- end }}

{{- define "auth-sidecar.injector.labels" -}}
helm.sh/chart: {{ include "auth-sidecar.chart" . }}
{{ include "auth-sidecar.injector.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The webhook's image: injector.image, or the sidecar's (the same binary, its inject command). */}}
{{- define "auth-sidecar.injector.image" -}}
{{- $i := .Values.injector.image }}
{{- printf "%s:%s" (default .Values.sidecar.image.repository $i.repository) (default (default .Chart.AppVersion .Values.sidecar.image.tag) $i.tag) }}
{{- end }}

{{/* The Secret holding the serving certificate: cert-manager's, or the given one. */}}
{{- define "auth-sidecar.injector.tlsSecret" -}}
{{- if .Values.injector.certManager.enabled }}
{{- include "auth-sidecar.injector.fullname" . }}-tls
{{- else }}
{{- required "injector.tls.secretName is required (or injector.certManager.enabled): the webhook's serving certificate" .Values.injector.tls.secretName }}
{{- end }}
{{- end }}

{{/*
The webhook's namespaceSelector: injector.namespaceSelector, with
kube-system and the release's namespace always left out, so that the
webhook is never asked about its own pods (with failurePolicy Fail, a
webhook with no pod left could not start one).
*/}}
{{- define "auth-sidecar.injector.namespaceSelector" -}}
{{- $s := default (dict) .Values.injector.namespaceSelector }}
{{- with $s.matchLabels }}
matchLabels:
  {{- toYaml . | nindent 2 }}
{{- end }}
matchExpressions:
  {{- with $s.matchExpressions }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: [kube-system, {{ .Release.Namespace | quote }}]
{{- end }}
