package prestop

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"draingate.dev/draingate/api"
)

// Install copies the executable at src to dir/draingate-prestop, mode 0755,
// and returns the new file's path. It writes a temporary file in dir and
// renames it into place, so the app container never sees a half-written
// agent, even when an init container is restarted mid-copy.
func Install(src, dir string) (dst string, err error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("target directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("target %s is not a directory", dir)
	}
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("reading the agent: %w", err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, "."+api.AgentFile+"-*.tmp")
	if err != nil {
		return "", fmt.Errorf("writing into %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, in); err != nil {
		return "", fmt.Errorf("copying the agent: %w", err)
	}
	// Chmod on the open file sets 0755 whatever the umask.
	if err = tmp.Chmod(0o755); err != nil {
		return "", err
	}
	if err = tmp.Sync(); err != nil {
		return "", err
	}
	if err = tmp.Close(); err != nil {
		return "", err
	}
	dst = filepath.Join(dir, api.AgentFile)
	if err = os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	return dst, nil
}
