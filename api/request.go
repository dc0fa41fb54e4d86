package api

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DrainRequest is one question to the wait API: is this pod out of every
// route yet?
type DrainRequest struct {
	Namespace string // a DNS-1123 label
	Pod       string // a DNS-1123 subdomain
	// UID, when set, must match the pod's: a pod recreated under the same
	// name (a StatefulSet's) is another pod with other routes.
	UID string
	// Wait is how long the server may hold the request for a release; zero
	// asks for the current verdict at once. The server caps it.
	Wait time.Duration
	// Traffic is the agent's evidence of what its pod still receives; nil
	// when it has none. An older server ignores it (unknown query
	// parameters are ignored), so it can only make a wait shorter or
	// longer on a server that understands it.
	Traffic *Traffic
}

// RequestError is a drain request the server must refuse. Its message is one
// sentence naming what was wrong, fit for a 4xx body and a log line.
type RequestError struct {
	// Status is the HTTP status to answer with: 400 (malformed) or 405
	// (method).
	Status  int
	Message string
}

func (e *RequestError) Error() string { return e.Message }

// The statuses are spelled out: importing net/http for two constants would
// link all of it, TLS included, into the agent and double its size.
const (
	statusBadRequest       = 400
	statusMethodNotAllowed = 405
)

func badRequest(format string, args ...any) error {
	return &RequestError{Status: statusBadRequest, Message: fmt.Sprintf(format, args...)}
}

// ParseDrainRequest reads a drain request from the method and URL of an HTTP
// request. Its errors are *RequestError. Query parameters other than uid,
// wait, traffic, traffic-every-us, traffic-looks, traffic-gaps and
// traffic-conns (read only beside traffic, the last three only beside
// traffic-every-us) are ignored, so a newer agent can still ask an older
// server.
func ParseDrainRequest(method string, u *url.URL) (DrainRequest, error) {
	if method != "GET" {
		return DrainRequest{}, &RequestError{
			Status:  statusMethodNotAllowed,
			Message: fmt.Sprintf("method %s is not allowed: the drain API answers GET only", Quote(method, maxQuoted)),
		}
	}
	if u == nil {
		return DrainRequest{}, badRequest("the request has no URL")
	}
	// u.Path is decoded, so an escaped '/' (%2F) becomes a separator and
	// fails the segment count instead of sneaking into a name.
	seg := strings.Split(u.Path, "/")
	if len(seg) != 7 || seg[0] != "" || seg[1] != "v1" || seg[2] != "namespaces" || seg[4] != "pods" || seg[6] != "drain" {
		return DrainRequest{}, badRequest("path %s is not a drain path: want /v1/namespaces/{namespace}/pods/{name}/drain", Quote(u.Path, maxQuoted))
	}
	r := DrainRequest{Namespace: seg[3], Pod: seg[5]}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return DrainRequest{}, badRequest("the query string is malformed: %v", err)
	}
	for _, k := range []string{"uid", "wait", "traffic", trafficEveryParam, trafficLooksParam, trafficGapsParam, trafficConnsParam} {
		if n := len(q[k]); n > 1 {
			return DrainRequest{}, badRequest("query parameter %s is given %d times: give it once", k, n)
		}
	}
	r.UID = q.Get("uid")
	if w, ok := q["wait"]; ok {
		d, err := time.ParseDuration(w[0])
		if err != nil {
			return DrainRequest{}, badRequest("wait %s is not a duration such as 20s or 1m30s", Quote(w[0], maxQuoted))
		}
		r.Wait = d
	}
	if tr, ok := q["traffic"]; ok {
		if r.Traffic, err = ParseTraffic(tr[0]); err != nil {
			return DrainRequest{}, err
		}
		if e, ok := q[trafficEveryParam]; ok {
			if r.Traffic.Every, err = parseEvery(e[0], r.Traffic.Watched); err != nil {
				return DrainRequest{}, err
			}
			if l, ok := q[trafficLooksParam]; ok {
				if err := parseLooks(l[0], r.Traffic.Sources); err != nil {
					return DrainRequest{}, err
				}
			}
			if g, ok := q[trafficGapsParam]; ok {
				if err := parseGaps(g[0], r.Traffic.Sources); err != nil {
					return DrainRequest{}, err
				}
			}
			if c, ok := q[trafficConnsParam]; ok {
				if err := parseConns(c[0], r.Traffic); err != nil {
					return DrainRequest{}, err
				}
			}
		}
	}
	if err := r.Validate(); err != nil {
		return DrainRequest{}, err
	}
	return r, nil
}

// Validate checks the request's fields; its errors are *RequestError with
// status 400. The agent uses it to catch a bad pod identity before asking.
func (r DrainRequest) Validate() error {
	if !isDNSLabel(r.Namespace) {
		return badRequest("namespace %s is not a valid namespace name: want a DNS-1123 label (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)", Quote(r.Namespace, maxQuoted))
	}
	if !isDNSSubdomain(r.Pod) {
		return badRequest("pod name %s is not a valid pod name: want a DNS-1123 subdomain (at most 253 lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit)", Quote(r.Pod, maxQuoted))
	}
	if r.UID != "" && !isUID(r.UID) {
		return badRequest("uid %s is not a valid pod UID: want hex digits and '-' (a UUID), at most 64 characters", Quote(r.UID, maxQuoted))
	}
	if r.Wait < 0 {
		return badRequest("wait %s is negative", r.Wait)
	}
	return nil
}

// Path is the request's URL path.
func (r DrainRequest) Path() string {
	return "/v1/namespaces/" + url.PathEscape(r.Namespace) + "/pods/" + url.PathEscape(r.Pod) + "/drain"
}

// URL is the request's full URL under base, the server's root such as
// "http://draingate.draingate-system.svc:8080". A zero Wait and an empty UID
// are left out of the query.
func (r DrainRequest) URL(base string) string {
	q := url.Values{}
	if r.UID != "" {
		q.Set("uid", r.UID)
	}
	if r.Wait != 0 {
		// Duration.String parses back to the same value, so the server reads
		// exactly what the agent meant.
		q.Set("wait", r.Wait.String())
	}
	if r.Traffic != nil {
		q.Set("traffic", EncodeTraffic(r.Traffic))
		if r.Traffic.Every > 0 {
			// Microseconds: a mean interval is rarely whole milliseconds,
			// and rounding it down would make the server count looks the
			// agent never took.
			q.Set(trafficEveryParam, strconv.FormatInt(max(r.Traffic.Every.Microseconds(), 1), 10))
			if l := encodeLooks(r.Traffic.Sources); l != "" {
				q.Set(trafficLooksParam, l)
			}
			if g := encodeGaps(r.Traffic.Sources); g != "" {
				q.Set(trafficGapsParam, g)
			}
			if r.Traffic.ConnsCounted {
				// Even empty (no sources): its presence says the agent
				// counted, so that no entry means no new connection.
				q.Set(trafficConnsParam, encodeConns(r.Traffic))
			}
		}
	}
	s := strings.TrimRight(base, "/") + r.Path()
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// trafficEveryParam is the query parameter of Traffic.Every, in whole
// microseconds.
const trafficEveryParam = "traffic-every-us"

// trafficLooksParam is the query parameter of the sources' Looks and
// RecentLooks: per source, in the order of the traffic parameter's,
// "N.Pauses.N.Pauses", comma-separated.
const trafficLooksParam = "traffic-looks"

// maxLooks bounds a look count: more than a summary's arrivals can be.
const maxLooks = 1 << 30

// encodeLooks writes the traffic-looks parameter of the sources that
// EncodeTraffic writes; empty when none counted its looks.
func encodeLooks(sources []SourceTraffic) string {
	return encodePerSource(sources, func(s SourceTraffic) ([]int, bool) {
		return []int{s.Looks.N, s.Looks.Pauses, s.RecentLooks.N, s.RecentLooks.Pauses}, s.Looks.N > 0
	})
}

// encodePerSource writes a per-source query parameter: for each source
// EncodeTraffic writes, comma-separated, its counts (fields) joined by
// '.', each from 0 to maxLooks; empty when fields counted none.
func encodePerSource(sources []SourceTraffic, fields func(SourceTraffic) ([]int, bool)) string {
	var b strings.Builder
	counted := false
	for i, s := range sources {
		if i == MaxTrafficSources {
			break
		}
		if i > 0 {
			b.WriteString(",")
		}
		f, c := fields(s)
		writeCounts(&b, f)
		counted = counted || c
	}
	if !counted {
		return ""
	}
	return b.String()
}

// writeCounts writes counts joined by '.', each from 0 to maxLooks.
func writeCounts(b *strings.Builder, counts []int) {
	for j, v := range counts {
		if j > 0 {
			b.WriteString(".")
		}
		b.WriteString(strconv.Itoa(min(max(v, 0), maxLooks)))
	}
}

// perSource splits a per-source query parameter's value into its sources'
// entries (f, as many as the traffic's sources), each into its counts (from
// 0 to maxLooks; none for an empty entry).
func perSource(s, param, what string, sources int) (f []string, counts [][]int, err error) {
	f = strings.Split(s, ",")
	if len(f) != sources {
		return nil, nil, badRequest("%s gives %d sources' %s, the traffic %d", param, len(f), what, sources)
	}
	out := make([][]int, len(f))
	for i, e := range f {
		if out[i], err = parseCounts(e, param, e); err != nil {
			return nil, nil, err
		}
	}
	return f, out, nil
}

// parseCounts reads s, counts from 0 to maxLooks joined by '.' (none when
// empty); entry is the per-source entry that holds it, for errors.
func parseCounts(s, param, entry string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for x := range strings.SplitSeq(s, ".") {
		c, err := strconv.Atoi(x)
		if !digits(x) || err != nil || c > maxLooks {
			return nil, badRequest("%s %s: %s is not a count from 0 to %d", param, Quote(entry, maxQuoted), Quote(x, maxQuoted), maxLooks)
		}
		out = append(out, c)
	}
	return out, nil
}

// parseLooks reads the traffic-looks parameter into sources (one entry
// each): counts up to maxLooks, no more pauses than looks, no more recent
// looks than looks.
func parseLooks(s string, sources []SourceTraffic) error {
	f, entries, err := perSource(s, trafficLooksParam, "looks", len(sources))
	if err != nil {
		return err
	}
	for i, n := range entries {
		if sources[i].Looks, sources[i].RecentLooks, err = looksOf(n, trafficLooksParam, f[i]); err != nil {
			return err
		}
	}
	return nil
}

// looksOf reads one source's look counts n, from the entry of param that
// holds them: no more pauses than looks, no more recent looks than looks.
func looksOf(n []int, param, entry string) (all, recent Looks, err error) {
	if len(n) != 4 {
		return Looks{}, Looks{}, badRequest("%s %s: want looks.pauses.recent looks.recent pauses", param, Quote(entry, maxQuoted))
	}
	if n[1] > n[0] || n[3] > n[2] || n[2] > n[0] {
		return Looks{}, Looks{}, badRequest("%s %s: more pauses than looks, or more recent looks than looks", param, Quote(entry, maxQuoted))
	}
	return Looks{N: n[0], Pauses: n[1]}, Looks{N: n[2], Pauses: n[3]}, nil
}

// trafficGapsParam is the query parameter of the sources' Gaps: per
// source, in the order of the traffic parameter's, comma-separated, the
// bins' "N.Sum" joined by "." from the first, trailing empty bins left out
// (empty: none counted, or none yet).
const trafficGapsParam = "traffic-gaps"

// encodeGaps writes the traffic-gaps parameter of the sources that
// EncodeTraffic writes; empty when none counted its gaps.
func encodeGaps(sources []SourceTraffic) string {
	return encodePerSource(sources, func(s SourceTraffic) ([]int, bool) {
		return gapFields(s.Gaps), s.Gaps != nil
	})
}

// gapFields is gaps as traffic-gaps writes them: each bin's count and sum,
// trailing empty bins left out.
func gapFields(gaps []GapBin) []int {
	bins := gaps[:min(len(gaps), GapBins)]
	for len(bins) > 0 && bins[len(bins)-1] == (GapBin{}) {
		bins = bins[:len(bins)-1]
	}
	var f []int
	for _, g := range bins {
		f = append(f, g.N, g.Sum)
	}
	return f
}

// parseGaps reads the traffic-gaps parameter into sources (one entry each):
// counts and sums up to maxLooks, each bin's sum within what its count of
// gaps of its lengths can make, no more gaps than looks.
func parseGaps(s string, sources []SourceTraffic) error {
	f, entries, err := perSource(s, trafficGapsParam, "gaps", len(sources))
	if err != nil {
		return err
	}
	for i, n := range entries {
		looks := sources[i].Looks.N
		if looks == 0 {
			looks = -1 // not counted (or one arrival, which has no gap)
		}
		if sources[i].Gaps, err = gapsOf(n, looks, trafficGapsParam, f[i]); err != nil {
			return err
		}
	}
	return nil
}

// gapsOf reads one source's gap bins n, from the entry of param that holds
// them: each bin's sum within what its count of gaps of its lengths can
// make, no more gaps than looks (its Looks.N; negative: not counted).
// Nil when none were counted, or only empty bins (a source of one
// arrival).
func gapsOf(n []int, looks int, param, entry string) ([]GapBin, error) {
	e := func() string { return Quote(entry, maxQuoted) } // for errors only
	if len(n)%2 != 0 || len(n) > 2*GapBins {
		return nil, badRequest("%s %s: want up to %d pairs of a count and a sum, joined by '.'", param, e(), GapBins)
	}
	gaps, total := make([]GapBin, GapBins), 0
	for j := 0; j < len(n); j += 2 {
		bin, lo := j/2, 1<<(j/2)
		if n[j+1] < n[j]*lo || bin < GapBins-1 && n[j+1] > n[j]*(2*lo-1) {
			return nil, badRequest("%s %s: %d gaps of bin %d cannot sum to %d looks", param, e(), n[j], bin, n[j+1])
		}
		gaps[bin] = GapBin{N: n[j], Sum: n[j+1]}
		total += n[j]
	}
	if looks >= 0 && total > looks {
		return nil, badRequest("%s %s: more gaps than looks (%d)", param, e(), looks)
	}
	if total == 0 {
		return nil, nil
	}
	return gaps, nil
}

// trafficConnsParam is the query parameter of the sources' Open and
// Traffic.NewConns, present when Traffic.ConnsCounted: per source, in the
// order of the traffic parameter's, ';'-separated, its Open, followed
// when it has an entry in NewConns by
//
//	,<arrivals>,<first ms>,<max gap ms>,<ages>,<looks>,<gaps>
//
// the first four as the traffic parameter writes a source's, looks as
// traffic-looks and gaps as traffic-gaps (empty: no gap yet). Empty with
// no sources.
const trafficConnsParam = "traffic-conns"

// maxConnsBytes bounds the traffic-conns parameter: every source at every
// bound makes about 12 KB.
const maxConnsBytes = 16 << 10

// encodeConns writes the traffic-conns parameter of the sources that
// EncodeTraffic writes. An entry of NewConns whose (Addr, Port) is not
// one of theirs, or that has no arrivals, is left out.
func encodeConns(t *Traffic) string {
	byKey := make(map[netip.AddrPort]SourceTraffic, len(t.NewConns))
	for _, n := range t.NewConns {
		if n.Arrivals > 0 {
			byKey[netip.AddrPortFrom(n.Addr, n.Port)] = n
		}
	}
	var b strings.Builder
	for i, s := range t.Sources {
		if i == MaxTrafficSources {
			break
		}
		if i > 0 {
			b.WriteString(";")
		}
		writeCounts(&b, []int{s.Open})
		n, ok := byKey[netip.AddrPortFrom(s.Addr, s.Port)]
		if !ok {
			continue
		}
		b.WriteString(",")
		writeArrivals(&b, n)
		b.WriteString(",")
		writeCounts(&b, []int{n.Looks.N, n.Looks.Pauses, n.RecentLooks.N, n.RecentLooks.Pauses})
		b.WriteString(",")
		writeCounts(&b, gapFields(n.Gaps))
	}
	return b.String()
}

// parseConns reads the traffic-conns parameter into t (one entry per
// source): the sources' Open, and NewConns, each entry checked as a
// source's arrivals, looks and gaps are, and as a part of its source's
// arrivals: no more of them, the first no older.
func parseConns(s string, t *Traffic) error {
	if len(s) > maxConnsBytes {
		return badRequest("%s is %d bytes: at most %d", trafficConnsParam, len(s), maxConnsBytes)
	}
	t.ConnsCounted = true
	if s == "" && len(t.Sources) == 0 {
		return nil
	}
	f := strings.Split(s, ";")
	if len(f) != len(t.Sources) {
		return badRequest("%s gives %d sources' connections, the traffic %d", trafficConnsParam, len(f), len(t.Sources))
	}
	for i, e := range f {
		src := &t.Sources[i]
		open, rest, more := strings.Cut(e, ",")
		n, err := parseCounts(open, trafficConnsParam, e)
		if err != nil {
			return err
		}
		if len(n) != 1 {
			return badRequest("%s %s: want the count of open connections first", trafficConnsParam, Quote(e, maxQuoted))
		}
		src.Open = n[0]
		if !more {
			continue
		}
		g := strings.Split(rest, ",")
		if len(g) != 6 {
			return badRequest("%s %s: want open,arrivals,first,gap,ages,looks,gaps", trafficConnsParam, Quote(e, maxQuoted))
		}
		key := netip.AddrPortFrom(src.Addr, src.Port)
		nc, err := parseArrivals(strings.Join(g[:4], ","), t.Watched)
		if err != nil {
			return badRequest("%s new connections from %s: %v", trafficConnsParam, key, err)
		}
		if nc.Arrivals > src.Arrivals || nc.First > src.First {
			return badRequest("%s new connections from %s: %d arrivals since %s ago are not among the source's %d since %s ago",
				trafficConnsParam, key, nc.Arrivals, nc.First, src.Arrivals, src.First)
		}
		if n, err = parseCounts(g[4], trafficConnsParam, e); err != nil {
			return err
		}
		if nc.Looks, nc.RecentLooks, err = looksOf(n, trafficConnsParam, e); err != nil {
			return err
		}
		if n, err = parseCounts(g[5], trafficConnsParam, e); err != nil {
			return err
		}
		if nc.Gaps, err = gapsOf(n, nc.Looks.N, trafficConnsParam, e); err != nil {
			return err
		}
		nc.Addr, nc.Port = src.Addr, src.Port
		t.NewConns = append(t.NewConns, nc)
	}
	return nil
}

// parseEvery reads Traffic.Every: from a microsecond to a minute, and no
// longer than the watch (one look needs two samples).
func parseEvery(s string, watched time.Duration) (time.Duration, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if !digits(s) || err != nil || v < 1 || v > int64(time.Minute/time.Microsecond) {
		return 0, badRequest("%s %s is not microseconds from 1 to a minute", trafficEveryParam, Quote(s, maxQuoted))
	}
	d := time.Duration(v) * time.Microsecond
	if d > watched+time.Millisecond {
		return 0, badRequest("%s %s is longer than the watch (%s): no look was taken twice", trafficEveryParam, d, watched)
	}
	return d, nil
}

// isDNSLabel reports whether s is an RFC 1123 label as Kubernetes checks
// namespace names.
func isDNSLabel(s string) bool {
	return len(s) <= 63 && isLabelish(s)
}

// isDNSSubdomain reports whether s is an RFC 1123 subdomain as Kubernetes
// checks pod names: the 253 limit is on the whole name, not per part.
func isDNSSubdomain(s string) bool {
	if len(s) > 253 {
		return false
	}
	for part := range strings.SplitSeq(s, ".") {
		if !isLabelish(part) {
			return false
		}
	}
	return true
}

func isLabelish(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// isUID accepts what pods carry in metadata.uid: a UUID from the API server,
// or for a static pod the kubelet's hex hash of its manifest. Loose on
// layout, strict on alphabet: the point is to keep junk out of the server's
// lookups and logs, not to re-implement UUID parsing.
func isUID(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-') {
			return false
		}
	}
	return true
}

// maxQuoted bounds a caller's input quoted in an error message, so a huge
// URL cannot flood a log line or a response body.
const maxQuoted = 80
