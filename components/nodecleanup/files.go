package nodecleanup

// This file removes the agent's files and folders from the node, and
// finds the node's paths under its root.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kos-sdn/kos/components/fabric/ovs"
)

// node returns a resolved path as the node names it, for messages.
func (c *cleanup) node(p string) string {
	rel, err := filepath.Rel(filepath.Clean(c.cfg.Root), p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return "/" + filepath.ToSlash(rel)
}

// removeFiles removes the CNI plugin, the leftovers of an interrupted
// install beside it, the CNI socket, and the folders the agent's pod made.
func (c *cleanup) removeFiles(cniServes bool) error {
	if err := c.remove(c.cfg.CNIBinary); err != nil {
		return err
	}
	// cni.Install's temporary files.
	tmps, err := filepath.Glob(filepath.Join(filepath.Dir(c.cfg.CNIBinary), "."+filepath.Base(c.cfg.CNIBinary)+".tmp-*"))
	if err != nil {
		return fmt.Errorf("finding temporary files of %s: %w", c.cfg.CNIBinary, err)
	}
	for _, tmp := range tmps {
		if err := c.remove(tmp); err != nil {
			return err
		}
	}
	if err := c.remove(c.cfg.CNISocket); err != nil {
		return err
	}
	if cniServes {
		c.say("The agent still serving (forced) keeps %s", c.node(filepath.Dir(c.cfg.CNISocket)))
	}
	if err := c.removeIfEmpty(filepath.Dir(c.cfg.CNISocket)); err != nil {
		return err
	}
	// The pod's hostPath volume of the node's own run dir made it on a
	// node that has none; an Open vSwitch's run dir is never empty.
	if ovs.Answers(c.cfg.HostOVSRunDir) != nil {
		return c.removeIfEmpty(c.cfg.HostOVSRunDir)
	}
	return nil
}

// remove removes a file, if it exists.
func (c *cleanup) remove(path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("removing %s: %w", path, err)
	}
	c.changed("Removed %s", c.node(path))
	return nil
}

// removeAll removes a folder and what it holds, if it exists. A folder that
// is a mount point (rmdir says EBUSY), as where a node's folders are bind
// mounts, is emptied and kept.
func (c *cleanup) removeAll(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	err = os.RemoveAll(dir)
	switch {
	case errors.Is(err, syscall.EBUSY):
		if len(entries) > 0 {
			c.changed("Emptied %s (a mount point, kept)", c.node(dir))
		}
		return nil
	case err != nil:
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	c.changed("Removed %s", c.node(dir))
	return nil
}

// removeIfEmpty removes a folder if it exists, is empty and is no mount
// point.
func (c *cleanup) removeIfEmpty(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || len(entries) > 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	err = os.Remove(dir)
	switch {
	case errors.Is(err, syscall.EBUSY):
		return nil
	case err != nil:
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	c.changed("Removed %s (empty)", c.node(dir))
	return nil
}

// underRoot returns the path p of the node whose root file system is at
// root, following symbolic links as the node would, inside root (on many
// nodes /var/run is a link to /run). Components that do not exist yet are
// joined as they are.
func underRoot(root, p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	root = filepath.Clean(root)
	todo := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	resolved := "/"
	for hops := 0; len(todo) > 0; {
		part := todo[0]
		todo = todo[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, part)
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			// Not a link, or not there: taken as it is.
			resolved = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("resolving %s under %s: too many symbolic links", p, root)
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		todo = append(strings.Split(strings.TrimPrefix(target, "/"), "/"), todo...)
	}
	return filepath.Join(root, resolved), nil
}
