package release

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push pushes each image's index to <prefix>/<name>:<version> with the
// standard credential chain (the Docker config file and its credential
// helpers, as `docker login` or `crane auth login` leave them), and
// returns the references pushed, by digest.
func Push(ctx context.Context, images []Image, prefix, version string) ([]string, error) {
	var out []string
	for _, img := range images {
		ref, err := name.NewTag(prefix+"/"+img.Name+":"+version, name.StrictValidation)
		if err != nil {
			return out, fmt.Errorf("push %s: reference: %w (want PUSH=registry/prefix, e.g. ghcr.io/acme)", img.Name, err)
		}
		if err := remote.WriteIndex(ref, img.Index, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return out, fmt.Errorf("push %s: %w", ref, err)
		}
		out = append(out, ref.Context().Digest(img.Digest.String()).String())
	}
	return out, nil
}
