// Package clustertest holds the tests of the test cluster itself: real pods
// on the real kubelet, and the termination ordering draingate relies on.
package clustertest
