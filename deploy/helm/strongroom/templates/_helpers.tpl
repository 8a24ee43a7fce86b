{{/* Names, labels and the config files shared by the templates. */}}
{{- define "strongroom.gateway" -}}{{ .Release.Name }}-gateway{{- end -}}
{{- define "strongroom.engine" -}}{{ .Release.Name }}-engine{{- end -}}

{{- define "strongroom.labels" -}}
app.kubernetes.io/name: strongroom
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "strongroom.gatewaySelector" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "strongroom.engineSelector" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: engine
{{- end -}}

{{- define "strongroom.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag }}{{- end -}}

{{/* The engines' URLs: one per StatefulSet pod, through the headless Service's pod DNS names. */}}
{{- define "strongroom.engineUrls" -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.engine.replicas) -}}
{{- $host := printf "%s-%d.%s.%s.svc.%s" (include "strongroom.engine" $) $i (include "strongroom.engine" $) $.Release.Namespace $.Values.clusterDomain -}}
{{- $urls = append $urls (printf "https://%s:%d" $host (int $.Values.engine.port)) -}}
{{- end -}}
{{- toJson $urls -}}
{{- end -}}

{{/* A TOML table entry from a map: strings and lists as JSON (valid TOML), maps as inline tables. */}}
{{- define "strongroom.tomlPairs" -}}
{{- range $key, $value := . }}
{{- if kindIs "map" $value }}
{{ $key }} = { {{- range $k, $v := $value }}{{ toJson $k }} = {{ toJson $v }}, {{ end -}} }
{{- else }}
{{ $key }} = {{ toJson $value }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Pod security shared by both workloads: non-root, no privilege escalation, read-only root. */}}
{{- define "strongroom.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile: { type: RuntimeDefault }
{{- end -}}

{{- define "strongroom.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: { drop: [ALL] }
{{- end -}}
