{{/* The image of every component. */}}
{{- define "nodemgr.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Labels every object carries; `component` is the part of nodemgr it belongs to. */}}
{{- define "nodemgr.labels" -}}
app.kubernetes.io/name: {{ .component }}
app.kubernetes.io/part-of: nodemgr
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end }}

{{/* The selector of a component's pods. */}}
{{- define "nodemgr.selector" -}}
app.kubernetes.io/name: {{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{/* Flags of /metrics every binary shares. */}}
{{- define "nodemgr.metricsArgs" -}}
- --metrics-auth={{ .Values.metrics.auth }}
{{- if and (eq .Values.metrics.auth "kubernetes") .Values.certManager.enabled }}
- --metrics-tls-cert=/etc/nodemgr/metrics-tls/tls.crt
- --metrics-tls-key=/etc/nodemgr/metrics-tls/tls.key
{{- end }}
- --log-format={{ .Values.logFormat }}
{{- end }}

{{/* The metrics certificate volume (cert-manager only; otherwise self-signed at start). */}}
{{- define "nodemgr.metricsVolumeMounts" -}}
{{- if and (eq .Values.metrics.auth "kubernetes") .Values.certManager.enabled }}
- name: metrics-tls
  mountPath: /etc/nodemgr/metrics-tls
  readOnly: true
{{- end }}
{{- end }}
{{- define "nodemgr.metricsVolumes" -}}
{{- if and (eq .Values.metrics.auth "kubernetes") .Values.certManager.enabled }}
- name: metrics-tls
  secret:
    secretName: {{ .Values.metrics.tlsSecretName }}
{{- end }}
{{- end }}

{{/* The scheme of /metrics. */}}
{{- define "nodemgr.metricsScheme" -}}
{{ if eq .Values.metrics.auth "kubernetes" }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/* The issuer of cert-manager certificates. */}}
{{- define "nodemgr.issuerRef" -}}
{{- if .Values.certManager.issuerRef }}
{{- toYaml .Values.certManager.issuerRef }}
{{- else }}
kind: Issuer
name: nodemgr-selfsigned
{{- end }}
{{- end }}

{{/* Hardened container security context of the components that need no privilege. */}}
{{- define "nodemgr.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}
{{- define "nodemgr.restrictedPod" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}
