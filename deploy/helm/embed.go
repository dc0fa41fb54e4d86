// Package helm holds draingate's Helm chart, deploy/helm/draingate,
// embedded so that Go code (the lab, the cluster tests) installs exactly
// the chart in the tree; release/chart loads and installs it.
package helm

import "embed"

// FS holds the chart under "draingate/".
//
//go:embed all:draingate
var FS embed.FS
