package release

// This file names images and sets them in a kustomization.

import (
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/api/types"
)

// imageName returns an image reference without its tag and digest.
func imageName(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// imageOverride is the kustomize image that replaces name with ref.
func imageOverride(name, ref string) types.Image {
	img := types.Image{Name: name}
	if i := strings.Index(ref, "@"); i >= 0 {
		ref, img.Digest = ref[:i], ref[i+1:]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref, img.NewTag = ref[:i], ref[i+1:]
	}
	img.NewName = ref
	return img
}

// imageTag returns the tag the objects give the image name, "" for none.
func imageTag(objs []object, name string) string {
	for _, o := range objs {
		spec, _, ok, err := o.podSpec()
		if err != nil || !ok {
			continue
		}
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			if imageName(c.Image) != name || strings.Contains(c.Image, "@") {
				continue
			}
			if i := strings.LastIndex(c.Image, ":"); i > strings.LastIndex(c.Image, "/") {
				return c.Image[i+1:]
			}
		}
	}
	return ""
}

func imageOf(images []types.Image, name string) types.Image {
	for _, img := range images {
		if img.Name == name {
			return img
		}
	}
	return types.Image{Name: name}
}

func setImage(images []types.Image, img types.Image) []types.Image {
	for i := range images {
		if images[i].Name == img.Name {
			images[i] = img
			return images
		}
	}
	return append(images, img)
}
