package drain

import (
	"time"

	"draingate.dev/draingate/internal/gate"
)

// LiveReadEvery is liveReadEvery, for the tests outside the package.
const LiveReadEvery = liveReadEvery

// Tracked is what the tracker keeps of the pod "namespace/name": its UID,
// its memory and its agent's last ask; ok is false when it tracks none.
func (t *Tracker) Tracked(key string) (uid string, mem gate.Memory, asked time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.pods[key]
	if st == nil {
		return "", gate.Memory{}, time.Time{}, false
	}
	return st.key.UID, st.mem, st.asked, true
}
