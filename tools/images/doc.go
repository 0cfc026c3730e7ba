// Package images builds container images without a container engine: static
// Go binaries of this module, host programs with the shared libraries they
// load, and plain files are packed as layers on an empty base, written as a
// docker-format tarball and imported into containerd with ctr.
//
// Layers are reproducible: entries are sorted, owned by root and dated at the
// Unix epoch, so that the same inputs give the same digests.
//
// It does not pull or push: there is no registry anywhere in the picture.
// Kubernetes runs such images with imagePullPolicy Never (or IfNotPresent and
// the exact tag) once they are imported into the node's containerd.
package images
