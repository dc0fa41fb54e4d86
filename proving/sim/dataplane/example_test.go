package dataplane_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"draingate.dev/draingate/proving/sim/dataplane"
)

func Example() {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer app.Close()
	addr := netip.MustParseAddrPort(app.Listener.Addr().String())
	target := dataplane.Target{ID: addr.Addr().String(), Port: int32(addr.Port())}

	// A lab run would use an ALB-like Uniform(0, 20*time.Second, seed).
	lb := dataplane.New(dataplane.Config{Propagation: dataplane.Fixed(10 * time.Millisecond)})
	defer lb.Close()
	front := httptest.NewServer(lb)
	defer front.Close()

	// What the ELBv2 emulator reports as the target registers.
	lb.Apply(dataplane.Event{Target: target, To: "initial", At: time.Now()})
	lb.Apply(dataplane.Event{Target: target, To: "healthy", At: time.Now()})
	if err := lb.WaitInRotation(context.Background(), 1); err != nil {
		panic(err)
	}

	res, err := front.Client().Get(front.URL)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(res.StatusCode, string(body))

	// Deregistration: the target leaves rotation after the delay, and the
	// next request finds no target.
	lb.Apply(dataplane.Event{Target: target, To: "draining", At: time.Now()})
	for {
		if _, stopped := lb.StoppedAt(target); stopped {
			break
		}
		time.Sleep(time.Millisecond)
	}
	res, err = front.Client().Get(front.URL)
	if err != nil {
		panic(err)
	}
	res.Body.Close()
	fmt.Println(res.StatusCode)

	st := lb.Stats()
	fmt.Printf("total %d, failed %d\n", st.Total, st.Failed)
	// Output:
	// 200 ok
	// 503
	// total 2, failed 1
}
