package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entrypoint is where each image holds its binary (build/Dockerfile's
// layout, so the chart runs either).
const Entrypoint = "/usr/local/bin/holdfast-entrypoint"

// nonRoot is the user every image runs as; the chart asks for root only
// for holdfast-node.
const nonRoot = "65532:65532"

// ImageTag is an image's tag: the chart's appVersion, which its image
// references default to (the version without its v).
func ImageTag(version string) string { return strings.TrimPrefix(version, "v") }

// image is one platform's image of a static binary.
func image(bin, component, version, platform string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, dir := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(Entrypoint, "/"), Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.Bytes())), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, _ = strings.Cut(platform, "/")
	cfg.Config.Entrypoint = []string{Entrypoint}
	cfg.Config.User = nonRoot
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.source":   "https://github.com/holdfast-io/holdfast",
		"org.opencontainers.image.title":    component,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	return mutate.ConfigFile(img, cfg)
}

// writeImages writes a component's image index (one image per platform) as
// an OCI image layout archive, tagged with the release (ref.name), and
// pushes it when a registry is named.
func writeImages(o Options, work, component string, bins map[string]string) (string, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.Platforms {
		img, err := image(bins[p], component, o.Version, p)
		if err != nil {
			return "", err
		}
		goos, goarch, _ := strings.Cut(p, "/")
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: goarch}}})
	}
	dir := filepath.Join(work, "oci", component)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ImageTag(o.Version)})); err != nil {
		return "", err
	}
	out := filepath.Join(o.Out, fmt.Sprintf("%s_%s_oci.tar", component, o.Version))
	if err := tarDir(out, dir); err != nil {
		return "", err
	}
	if o.Registry != "" {
		ref, err := name.NewTag(fmt.Sprintf("%s/%s:%s", o.Registry, component, ImageTag(o.Version)))
		if err != nil {
			return "", err
		}
		if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return "", fmt.Errorf("pushing %s: %w", ref, err)
		}
		fmt.Fprintf(os.Stderr, "release: pushed %s\n", ref)
	}
	return out, nil
}

// tarDir writes dir's tree as an uncompressed tar (an OCI layout archive,
// as skopeo's oci-archive: reads it).
func tarDir(out, dir string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		// The same release builds the same archive.
		h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname = time.Unix(0, 0), 0, 0, "", ""
		if d.IsDir() {
			h.Name += "/"
			return tw.WriteHeader(h)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
