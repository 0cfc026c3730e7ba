package bundle

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// GitBase returns the Base of a git revision of the repository at root,
// such as HEAD or origin/main. Its error says when root is no git checkout
// or the revision does not exist.
func GitBase(root, rev string) (*Base, error) {
	if _, err := git(root, "rev-parse", "--verify", "--quiet", rev+"^{commit}"); err != nil {
		return nil, fmt.Errorf("git revision %q not found in %s (is it a git checkout with that revision?): %w", rev, root, err)
	}
	return &Base{
		Name: rev,
		Read: func(path string) ([]byte, bool, error) {
			listed, err := git(root, "ls-tree", "--name-only", rev, "--", path)
			if err != nil {
				return nil, false, err
			}
			if len(bytes.TrimSpace(listed)) == 0 {
				return nil, false, nil
			}
			data, err := git(root, "show", rev+":"+path)
			if err != nil {
				return nil, false, err
			}
			return data, true, nil
		},
	}, nil
}

// git runs git in root and returns its standard output.
func git(root string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("git %s: %s: %w", strings.Join(args, " "), msg, err)
		}
		return nil, fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return stdout.Bytes(), nil
}
