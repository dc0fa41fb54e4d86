package prestop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"draingate.dev/draingate/api"
)

// This file is a minimal HTTP/1.1 GET client. net/http would do, but it
// brings crypto/tls and HTTP/2 along and more than doubles the agent (6 MB
// against under 3 MB, static and stripped), and the agent only ever needs a
// plain GET to a cluster Service or to its own pod.

// response is what the agent reads from an answer.
type response struct {
	status int
	body   []byte
}

// maxResponse bounds what one answer may make the agent read: a verdict is a
// few kilobytes, and a hook's answer is not read for its content.
const maxResponse = 1 << 20

var errTooLarge = errors.New("response larger than 1 MiB")

// checkHTTPURL accepts an absolute http:// URL with a host. https is refused
// because the agent carries no TLS (see above).
func checkHTTPURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %v", raw, errors.Unwrap(err))
	}
	switch {
	case u.Scheme == "https":
		return nil, fmt.Errorf("%q: https is not supported: the agent speaks plain http only, to stay small", raw)
	case u.Scheme != "http" || u.Host == "" || u.Opaque != "":
		return nil, fmt.Errorf("%q is not an http://host[:port]/path URL", raw)
	case u.User != nil:
		return nil, fmt.Errorf("%q: user info in the URL is not supported", raw)
	}
	return u, nil
}

// dial opens the agent's connections: net.Dialer's. Tests put the agent on
// an in-memory network instead, where synctest's fake clock applies.
var dial = (&net.Dialer{}).DialContext

// httpGet sends one GET for rawURL and reads the answer, body included
// (discarded when keepBody is false), with header (one "Name: value" line,
// or ""). ctx bounds everything: dialing, writing, the server's holding
// time and reading.
func httpGet(ctx context.Context, rawURL string, keepBody bool, header string) (response, error) {
	u, err := checkHTTPURL(rawURL)
	if err != nil {
		return response{}, err
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	conn, err := dial(ctx, "tcp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return response{}, err
	}
	defer conn.Close()
	// Reads and writes block in the kernel, not on ctx: wake them when ctx
	// ends. Only then, so that an I/O timeout always finds ctx.Err() set
	// and is reported as the context's.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	resp, err := roundTrip(conn, u, keepBody, header)
	if err != nil && ctx.Err() != nil {
		return response{}, ctx.Err()
	}
	return resp, err
}

func roundTrip(conn net.Conn, u *url.URL, keepBody bool, header string) (response, error) {
	if strings.ContainsAny(header, "\r\n") {
		return response{}, errors.New("a header line holds a line break")
	}
	if header != "" {
		header += "\r\n"
	}
	// One request per connection: "Connection: close" spares the agent
	// keep-alive bookkeeping, and it asks at most every few seconds.
	req := "GET " + u.RequestURI() + " HTTP/1.1\r\n" +
		"Host: " + u.Host + "\r\n" +
		"User-Agent: draingate-prestop\r\n" +
		"Accept: application/json\r\n" + header +
		"Connection: close\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return response{}, err
	}
	// Headers count against the limit too, so a babbling peer cannot make
	// the agent read forever.
	lr := &io.LimitedReader{R: conn, N: maxResponse + 64<<10}
	tp := textproto.NewReader(bufio.NewReader(lr))
	var (
		status int
		hdr    textproto.MIMEHeader
	)
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return response{}, fmt.Errorf("reading the status line: %w", noEOF(err))
		}
		if status, err = parseStatusLine(line); err != nil {
			return response{}, err
		}
		if hdr, err = tp.ReadMIMEHeader(); err != nil {
			return response{}, fmt.Errorf("reading the headers: %w", noEOF(err))
		}
		// 1xx answers are interim; the real one follows.
		if status >= 200 {
			break
		}
	}
	if status == 204 || status == 304 {
		return response{status: status}, nil
	}
	body, err := readBody(tp.R, hdr)
	if err != nil {
		return response{status: status}, fmt.Errorf("reading the body of a %d answer: %w", status, err)
	}
	if !keepBody {
		body = nil
	}
	return response{status: status, body: body}, nil
}

func parseStatusLine(line string) (int, error) {
	proto, rest, _ := strings.Cut(line, " ")
	code, _, _ := strings.Cut(rest, " ")
	n, err := strconv.Atoi(code)
	if !strings.HasPrefix(proto, "HTTP/1.") || len(code) != 3 || err != nil || n < 100 {
		return 0, fmt.Errorf("not an HTTP/1.x status line: %s", api.Quote(line, 60))
	}
	return n, nil
}

func readBody(r *bufio.Reader, hdr textproto.MIMEHeader) ([]byte, error) {
	te := strings.ToLower(strings.TrimSpace(hdr.Get("Transfer-Encoding")))
	switch {
	case te != "" && te != "identity":
		// Compressed codings would need decoders the agent does not carry;
		// nobody sends them unasked.
		if te != "chunked" {
			return nil, fmt.Errorf("unsupported transfer encoding %q", te)
		}
		return readChunked(r)
	case hdr.Get("Content-Length") != "":
		n, err := strconv.ParseInt(strings.TrimSpace(hdr.Get("Content-Length")), 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad Content-Length %q", hdr.Get("Content-Length"))
		}
		if n > maxResponse {
			return nil, errTooLarge
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, noEOF(err)
		}
		return b, nil
	default:
		// No framing: the body runs to the end of the connection.
		b, err := io.ReadAll(io.LimitReader(r, maxResponse+1))
		if err != nil {
			return nil, err
		}
		if len(b) > maxResponse {
			return nil, errTooLarge
		}
		return b, nil
	}
}

func readChunked(r *bufio.Reader) ([]byte, error) {
	tp := textproto.NewReader(r)
	var body []byte
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return nil, noEOF(err)
		}
		sizeText, _, _ := strings.Cut(line, ";") // chunk extensions are ignored
		size, err := strconv.ParseUint(strings.TrimSpace(sizeText), 16, 63)
		if err != nil {
			return nil, fmt.Errorf("bad chunk size %s", api.Quote(line, 40))
		}
		if size == 0 {
			// Trailers, if any, end with an empty line; nothing in them matters.
			for {
				l, err := tp.ReadLine()
				if err != nil {
					return nil, noEOF(err)
				}
				if l == "" {
					return body, nil
				}
			}
		}
		if uint64(len(body))+size > maxResponse {
			return nil, errTooLarge
		}
		start := len(body)
		body = append(body, make([]byte, size)...)
		if _, err := io.ReadFull(r, body[start:]); err != nil {
			return nil, noEOF(err)
		}
		if l, err := tp.ReadLine(); err != nil || l != "" {
			return nil, errors.New("chunk not followed by CRLF")
		}
	}
}

// noEOF turns a bare EOF, which reads as "nothing wrong", into what it means
// mid-answer: the peer hung up.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
