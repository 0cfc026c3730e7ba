// Package bench holds the project's benchmarks that need a real control
// plane: channels against kubectl on the same objects. `make bench` runs them;
// their figures are written down in docs/benchmarks.md.
package bench
