package clustertest

import (
	"testing"

	"draingate.dev/draingate/proving/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
