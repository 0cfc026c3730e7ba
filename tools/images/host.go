package images

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// HostBinaries returns the files that run the host programs paths inside an
// image: each program at its host path, and every shared library `ldd` lists
// for it (the dynamic loader included) at the path ldd names, with the
// content of the file that path leads to. Statically linked programs come
// alone.
//
// Libraries that a program opens at run time with dlopen (NSS modules,
// plugins) are not listed by ldd; add them as Files.
func HostBinaries(ctx context.Context, paths ...string) ([]File, error) {
	var files []File
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			files = append(files, File{Path: p, Source: p})
		}
	}
	for _, p := range paths {
		abs, err := exec.LookPath(p)
		if err != nil {
			return nil, fmt.Errorf("finding %s: %w", p, err)
		}
		if abs, err = filepath.Abs(abs); err != nil {
			return nil, fmt.Errorf("finding %s: %w", p, err)
		}
		add(abs)
		libs, err := sharedLibraries(ctx, abs)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			add(lib)
		}
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// sharedLibraries runs ldd on program and returns the absolute paths it
// lists, or none for a static program.
func sharedLibraries(ctx context.Context, program string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "ldd", program)
	out, err := cmd.Output()
	if err != nil {
		// ldd fails, saying so, on a program that is not dynamic.
		var exit *exec.ExitError
		if errors.As(err, &exit) && strings.Contains(string(out)+string(exit.Stderr), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("listing the libraries of %s with ldd: %w", program, err)
	}
	return parseLDD(string(out))
}

// parseLDD reads ldd's output: lines such as
//
//	linux-vdso.so.1 (0x00007ffd...)
//	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f...)
//	/lib64/ld-linux-x86-64.so.2 (0x00007f...)
//	statically linked
//
// and returns the absolute paths, in order. The kernel's vDSO has no file.
func parseLDD(out string) ([]string, error) {
	var libs []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line == "statically linked" {
			continue
		}
		if _, target, ok := strings.Cut(line, "=>"); ok {
			line = strings.TrimSpace(target)
			if strings.HasPrefix(line, "not found") {
				return nil, fmt.Errorf("ldd: a library is missing: %s", sc.Text())
			}
		}
		lib, _, _ := strings.Cut(line, " (")
		if filepath.IsAbs(lib) {
			libs = append(libs, lib)
		}
	}
	return libs, sc.Err()
}
