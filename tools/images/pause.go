package images

import (
	"context"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// PauseTag is the tag of the pause image Pause builds, which a node's
// containerd names as its sandbox_image.
const PauseTag = "kos.example.com/pause:1"

// pausePackage is the pause program: it sleeps until SIGTERM or SIGINT and
// reaps orphaned children.
const pausePackage = "github.com/kos-sdn/kos/tools/images/pause"

// Pause builds the pause image: the static pause program of this module as
// /pause, its entrypoint. Binaries go to opts.OutDir.
func Pause(ctx context.Context, opts GoOptions) (v1.Image, error) {
	files, err := BuildGo(ctx, opts, pausePackage)
	if err != nil {
		return nil, err
	}
	files[0].Path = "/pause"
	layer, err := Layer(files)
	if err != nil {
		return nil, err
	}
	return New(Config{Entrypoint: []string{"/pause"}, Architecture: opts.Arch}, layer)
}
