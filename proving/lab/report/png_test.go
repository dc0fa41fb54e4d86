package report

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWritePNG(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.png")
	if err := sample().WritePNG(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	bounds := img.Bounds()
	if st.Size() < 10_000 || bounds.Dx() < 600 || bounds.Dy() < 600 {
		t.Errorf("PNG too small: %d bytes, %v", st.Size(), bounds)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
	if out := os.Getenv("REPORT_PNG_OUT"); out != "" { // to look at it
		data, _ := os.ReadFile(path)
		os.WriteFile(out, data, 0o644)
	}
}

func TestWritePNGEdgeCases(t *testing.T) {
	dir := t.TempDir()
	if err := (Report{}).WritePNG(filepath.Join(dir, "empty.png")); err == nil {
		t.Error("WritePNG with no strategy succeeded")
	}
	// A strategy that measured nothing still renders, rather than failing
	// the whole report.
	r := Report{Strategies: []Strategy{{Name: "draingate"}}}
	if err := r.WritePNG(filepath.Join(dir, "blank.png")); err != nil {
		t.Errorf("WritePNG of an empty strategy: %v", err)
	}
	// Unfilled (zero) times cannot be placed; they must not stretch the
	// shared x axis over two thousand years.
	t0 := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	odd := Strategy{Name: "odd", Timeline: Timeline{
		Start: t0, End: t0.Add(20 * time.Second),
		SIGTERMs: []time.Time{{}, t0.Add(5 * time.Second)},
		Rotation: []Step{{At: t0.Add(8 * time.Second), N: 2}, {N: 9}, {At: t0, N: 3}},
	}}
	if lo, hi := xRange([]Strategy{odd}); lo != 0 || hi != 20 {
		t.Errorf("xRange = %v, %v; want 0, 20", lo, hi)
	}
	if got := rotationXYs(odd.Timeline, 20); len(got) != 3 || got[0].X != 0 || got[1].X != 8 || got[2].X != 20 || got[2].Y != 2 {
		t.Errorf("rotationXYs = %v, want steps sorted, zero time dropped, held to End", got)
	}
	if err := (Report{Strategies: []Strategy{odd}}).WritePNG(filepath.Join(dir, "odd.png")); err != nil {
		t.Errorf("WritePNG with zero times: %v", err)
	}
	if err := r.WritePNG(filepath.Join(dir, "missing-dir", "x.png")); err == nil {
		t.Error("WritePNG into a missing directory succeeded")
	}
}
