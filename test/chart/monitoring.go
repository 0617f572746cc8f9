package chart

import (
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// MonitoringTypes are the Prometheus Operator kinds the chart may render;
// their CRDs are generated from these Go types (as the operator generates
// its own) for the server-side dry run.
var MonitoringTypes = []any{&monitoringv1.ServiceMonitor{}, &monitoringv1.PodMonitor{}, &monitoringv1.PrometheusRule{}}
