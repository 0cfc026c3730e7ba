package images

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// CRINamespace is the containerd namespace the CRI plugin, and so kubelet,
// sees images in.
const CRINamespace = "k8s.io"

// Import imports the images of a tarball written by Write into the containerd
// listening on the socket address, in CRINamespace, with ctr.
func Import(ctx context.Context, address, tarball string) error {
	cmd := exec.CommandContext(ctx, "ctr", "--address", address, "--namespace", CRINamespace, "images", "import", tarball)
	if said, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("importing %s into containerd at %s (%s): %w", tarball, address, strings.TrimSpace(string(said)), err)
	}
	return nil
}
