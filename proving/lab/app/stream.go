package app

import (
	"io"
	"net"
	"net/http"
	"time"
)

// StreamProtocol is the Upgrade token of GET /stream: a long-lived stream
// of messages, one line each way per message, as a WebSocket or a gRPC
// stream carries them.
const StreamProtocol = "draingate-stream"

// stream switches the connection to StreamProtocol and answers each line
// the client sends with "ok <hostname>", counting it like a GET / against
// its source address. On SIGTERM, between two messages, it sends "bye" and
// closes: the client's message still unanswered, if any, was not handled and
// goes again on a new stream, as a gRPC client does after a GOAWAY.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != StreamProtocol {
		http.Error(w, "want Upgrade: "+StreamProtocol, http.StatusUpgradeRequired)
		return
	}
	s.streamsMu.Lock()
	if s.stopping.Load() {
		s.streamsMu.Unlock()
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	s.streams.Add(1)
	s.streamsMu.Unlock()
	defer s.streams.Done()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Time{}) // a stream idles as long as it likes
	io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+StreamProtocol+"\r\n\r\n")

	// SIGTERM cuts the read waiting for the next message short.
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-s.streamsEnd:
			conn.SetReadDeadline(time.Now())
		case <-done:
		}
	}()
	for {
		_, err := brw.ReadString('\n')
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				io.WriteString(conn, "bye\n")
			}
			return
		}
		s.count(r.RemoteAddr)
		if _, err := io.WriteString(conn, "ok "+s.cfg.Hostname+"\n"); err != nil {
			return
		}

	}
}
