package clustertest

import (
	"testing"

	"draingate.dev/draingate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
