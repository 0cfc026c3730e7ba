package pki

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// WriteFiles writes the data of a Secret into dir/<secret name>/, one file
// per key as a Secret volume would, so that the containers of a pod can
// read certificates an init container just ensured: a Secret volume of a
// Secret that did not exist when the pod started stays empty for a while.
// The CA's private key is never written; private keys are readable by their
// owner only. Each file is written whole and renamed into place.
func WriteFiles(dir string, s *corev1.Secret) error {
	sub := filepath.Join(dir, s.Name)
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", sub, err)
	}
	keys := make([]string, 0, len(s.Data))
	for k := range s.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == CAKeyKey || strings.ContainsAny(k, `/\`) || k == "." || k == ".." {
			continue
		}
		mode := os.FileMode(0o644)
		if k == corev1.TLSPrivateKeyKey {
			mode = 0o600
		}
		if err := writeFile(filepath.Join(sub, k), s.Data[k], mode); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
