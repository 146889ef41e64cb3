//go:build tools

// What checks the monitoring the install ships (scripts/monitoring.sh): Prometheus' promtool, which
// parses the alerting rules and runs their unit tests, and the Prometheus Operator's module, whose
// CRDs the real control plane tier installs so the apiserver admits our PrometheusRule and
// ServiceMonitor against their real schemas. Pinned here, built into target/tools.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
