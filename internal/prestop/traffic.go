package prestop

import (
	"fmt"
	"strings"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/traffic"
)

// trafficInterval is how often the agent samples its pod's sockets: often
// enough that few connections open and close unseen, and cheap enough (one
// netlink dump of the pod's own sockets) to cost the pod nothing it would
// notice.
const trafficInterval = 100 * time.Millisecond

// startTraffic starts watching the pod's inbound TCP traffic with read
// (a traffic.Reader's): the baseline sample at once, so that the first ask
// already carries evidence (Read bounds itself to about a second, and takes
// milliseconds), then one every interval until stop is called.
// It returns what Config.Traffic should be: nil when the baseline read
// failed. A later failed read ends the sampling, and the watcher then
// answers nil: the server is never shown quiet that nobody watched. Each
// of these cases costs one log line; stop waits for the sampling goroutine
// to end.
func startTraffic(read func() (traffic.Snapshot, error), interval time.Duration, log logger) (summary func() *api.Traffic, stop func()) {
	w := traffic.NewWatcher(read)
	if err := w.Sample(time.Now()); err != nil {
		logTrafficOff(log, err)
		return nil, func() {}
	}
	ports := w.Listening()
	log.printf("traffic evidence on: watching inbound TCP to %s, sampling every %s", portList(ports), interval)
	passiveErr := w.PassiveOpensErr()
	if passiveErr != nil {
		logNoPassiveOpens(log, passiveErr)
	}

	gateways := traffic.Gateways()

	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		failedOnce := false
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			if err := w.Sample(time.Now()); err != nil {
				if w.Ended() != nil {
					logTrafficOff(log, err)
					return
				}
				if !failedOnce {
					failedOnce = true
					log.printf("traffic evidence: a sample failed (%s); sampling on, no evidence sent while none is recent", api.OneLine(err.Error()))
				}
			}
			if passiveErr == nil {
				if passiveErr = w.PassiveOpensErr(); passiveErr != nil {
					logNoPassiveOpens(log, passiveErr)
				}
			}
		}
	}()
	return func() *api.Traffic {
			t := w.Summary(time.Now())
			if t != nil {
				t.Gateways = gateways
			}
			return t
		}, func() {
			close(quit)
			<-done
		}
}

func logTrafficOff(log logger, err error) {
	log.printf("traffic evidence off: %s; the server relies on route tails alone", api.OneLine(err.Error()))
}

func logNoPassiveOpens(log logger, err error) {
	log.printf("traffic evidence: the passive-open counter is unreadable (%s); connections that open and close between two samples go uncounted", api.OneLine(err.Error()))
}

// portList names the listening ports for the start line: "2 listening
// ports (8080, 9090)", the first few only.
func portList(ports []uint16) string {
	const show = 8
	s := fmt.Sprintf("%d listening ports", len(ports))
	if len(ports) == 1 {
		s = "1 listening port"
	}
	if len(ports) == 0 {
		return s + " yet"
	}
	names := make([]string, 0, show+1)
	for i, p := range ports {
		if i == show {
			names = append(names, "…")
			break
		}
		names = append(names, fmt.Sprint(p))
	}
	return s + " (" + strings.Join(names, ", ") + ")"
}
