{{/*
The release's name prefix. `helm install parathink ...` gives parathink-mlflow, the host that
hydra_conf/cluster/gpu.yaml's MLFLOW_TRACKING_URI names; another release name gives <release>-parathink-mlflow.
*/}}
{{- define "parathink.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "parathink.mlflow.name" -}}
{{- printf "%s-mlflow" (include "parathink.fullname" .) -}}
{{- end -}}

{{/* Labels every object carries (the Kubernetes recommended set). */}}
{{- define "parathink.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* What the MLflow Deployment, its Service and its NetworkPolicy select on. */}}
{{- define "parathink.mlflow.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: mlflow
{{- end -}}

{{/* MLflow's allowed Host headers: the Service's in-cluster names (with and without the port), then the user's. */}}
{{- define "parathink.mlflow.allowedHosts" -}}
{{- $svc := include "parathink.mlflow.name" . -}}
{{- $hosts := list -}}
{{- range $name := list $svc (printf "%s.%s" $svc $.Release.Namespace) (printf "%s.%s.svc" $svc $.Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc $.Release.Namespace) -}}
{{- $hosts = append $hosts $name -}}
{{- $hosts = append $hosts (printf "%s:%d" $name (int $.Values.mlflow.port)) -}}
{{- end -}}
{{- concat $hosts .Values.mlflow.allowedHosts | join "," -}}
{{- end -}}

{{/* The MLflow server's environment: the backend URI assembled from the Postgres Secret, the S3 keys. */}}
{{- define "parathink.mlflow.env" -}}
{{- $pg := .Values.mlflow.backendStore.postgres -}}
{{- $art := .Values.mlflow.artifacts -}}
- name: PGUSER
  valueFrom: {secretKeyRef: {name: {{ $pg.existingSecret }}, key: {{ $pg.userKey }}}}
- name: PGPASSWORD
  valueFrom: {secretKeyRef: {name: {{ $pg.existingSecret }}, key: {{ $pg.passwordKey }}}}
# Kubernetes expands $(VAR) from the variables above: the password never appears in the manifest.
- name: MLFLOW_BACKEND_STORE_URI
  value: "postgresql://$(PGUSER):$(PGPASSWORD)@{{ $pg.host }}:{{ $pg.port }}/{{ $pg.database }}?sslmode={{ $pg.sslmode }}"
{{- if .Values.mlflow.auth.enabled }}
- name: MLFLOW_AUTH_DATABASE_URI
  value: "postgresql://$(PGUSER):$(PGPASSWORD)@{{ $pg.host }}:{{ $pg.port }}/{{ .Values.mlflow.auth.database }}?sslmode={{ $pg.sslmode }}"
{{- end }}
{{- if $art.existingSecret }}
# Optional: without the Secret the server uses its service account's cloud identity; with it, the keys win.
- name: AWS_ACCESS_KEY_ID
  valueFrom: {secretKeyRef: {name: {{ $art.existingSecret }}, key: AWS_ACCESS_KEY_ID, optional: true}}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom: {secretKeyRef: {name: {{ $art.existingSecret }}, key: AWS_SECRET_ACCESS_KEY, optional: true}}
{{- end }}
{{- if $art.s3EndpointUrl }}
- name: MLFLOW_S3_ENDPOINT_URL
  value: {{ $art.s3EndpointUrl | quote }}
{{- end }}
- name: HOME
  value: /tmp
{{- end -}}
