package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/action"

	"github.com/holdfast-io/holdfast/kubectl-holdfast/krew"
)

// Release builds every artifact of o into o.Out and returns their paths.
func Release(o Options) ([]string, error) {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "holdfast-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	var files, binaries []string

	for _, c := range Components {
		bins := map[string]string{}
		for _, p := range o.Platforms {
			bin, err := build(o, work, c, p)
			if err != nil {
				return nil, err
			}
			bins[p] = bin
			binaries = append(binaries, bin)
		}
		f, err := writeImages(o, work, c, bins)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", c, err)
		}
		files = append(files, f)
	}

	archives := map[string]string{} // archive name -> path
	for _, p := range o.PluginPlatforms {
		bin, err := build(o, work, Plugin, p)
		if err != nil {
			return nil, err
		}
		binaries = append(binaries, bin)
		goos, goarch, _ := strings.Cut(p, "/")
		name := fmt.Sprintf("%s_%s_%s_%s.tar.gz", Plugin, o.Version, goos, goarch)
		f := filepath.Join(o.Out, name)
		if err := pluginArchive(f, bin, filepath.Join(o.Root, "LICENSE")); err != nil {
			return nil, err
		}
		archives[name] = f
		files = append(files, f)
	}
	m, err := krewManifest(o, archives)
	switch {
	case err != nil:
		return nil, err
	case m != "":
		files = append(files, m)
	}

	p := action.NewPackage()
	p.Version = strings.TrimPrefix(o.Version, "v")
	p.AppVersion = p.Version
	p.Destination = o.Out
	ch, err := p.Run(filepath.Join(o.Root, "charts", "holdfast"), nil)
	if err != nil {
		return nil, fmt.Errorf("packaging charts/holdfast: %w", err)
	}
	files = append(files, ch)

	sbom := filepath.Join(o.Out, fmt.Sprintf("holdfast_%s.spdx.json", o.Version))
	if err := writeSBOM(sbom, o.Version, binaries); err != nil {
		return nil, err
	}
	files = append(files, sbom)

	sums := filepath.Join(o.Out, "SHA256SUMS")
	if err := writeSums(sums, files); err != nil {
		return nil, err
	}
	return append(files, sums), nil
}

// build builds cmd/<name> for platform (os/arch) as a static, stripped
// binary stamped with the release's version.
func build(o Options, work, name, platform string) (string, error) {
	goos, goarch, _ := strings.Cut(platform, "/")
	out := filepath.Join(work, goos+"_"+goarch, name)
	if goos == "windows" {
		out += ".exe"
	}
	cmd := exec.Command("go", "build", "-trimpath",
		"-ldflags", "-s -w -X github.com/holdfast-io/holdfast/internal/version.Version="+o.Version,
		"-o", out, "./cmd/"+name)
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s for %s: %v\n%s", name, platform, err, b)
	}
	return out, nil
}

// pluginArchive writes kubectl-holdfast and the licence as krew installs
// them (the manifest's files: the binary and LICENSE at the top).
func pluginArchive(path, bin, license string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, src := range []string{bin, license} {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		mode := int64(0o644)
		if src == bin {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.Base(src), Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return f.Close()
}

// krewManifest fills the krew manifest with each archive's sha256 and
// writes it, when this release built every platform the manifest names; a
// release of fewer platforms writes none and says so (its manifest could
// only point at archives that do not exist).
func krewManifest(o Options, archives map[string]string) (string, error) {
	var missing []string
	out, err := krew.Render(o.Version, func(uri string) (string, error) {
		f, ok := archives[path.Base(uri)]
		if !ok {
			missing = append(missing, path.Base(uri))
			return strings.Repeat("0", 64), nil
		}
		return fileSum(f)
	})
	if err != nil {
		return "", fmt.Errorf("krew manifest: %w", err)
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "release: no krew manifest: the archives %s were not built (-plugin-platforms)\n", strings.Join(missing, ", "))
		return "", nil
	}
	f := filepath.Join(o.Out, fmt.Sprintf("%s_%s_krew.yaml", Plugin, o.Version))
	return f, os.WriteFile(f, out, 0o644)
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeSums writes sha256sum's format, one line per file by base name.
func writeSums(out string, files []string) error {
	files = slices.Clone(files)
	sort.Slice(files, func(i, j int) bool { return filepath.Base(files[i]) < filepath.Base(files[j]) })
	var lines []string
	for _, f := range files {
		s, err := fileSum(f)
		if err != nil {
			return err
		}
		lines = append(lines, s+"  "+filepath.Base(f))
	}
	return os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
