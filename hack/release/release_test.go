package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"helm.sh/helm/v3/pkg/chart/loader"
	"sigs.k8s.io/yaml"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// untar extracts an archive (gzip when gz) into dir.
func untar(t *testing.T, archive, dir string, gz bool) map[string]os.FileMode {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if gz {
		if r, err = gzip.NewReader(f); err != nil {
			t.Fatal(err)
		}
	}
	modes := map[string]os.FileMode{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return modes
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		modes[h.Name] = os.FileMode(h.Mode)
		if err := os.WriteFile(p, data, os.FileMode(h.Mode)); err != nil {
			t.Fatal(err)
		}
	}
}

// A release of the host's platform holds every artifact, and each one is
// what it claims: images whose binary reports the release's version, run as
// non-root and carry it in their tag; the plugin archive as krew installs
// it; the chart at the release's version; an SBOM naming each binary's
// modules; SHA256SUMS that match. (The full release adds linux/arm64 images
// and four more plugin archives, with the krew manifest:
// TestTheKrewManifestNamesEachArchivesSum holds its filling.)
func TestAReleaseHoldsEveryArtifact(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatalf("the release runs its images' binaries here; it needs linux, not %s", runtime.GOOS)
	}
	const version = "v0.0.0-test.1"
	platform := runtime.GOOS + "/" + runtime.GOARCH
	out := t.TempDir()
	o := Options{Root: repoRoot(t), Version: version, Out: out, Platforms: []string{platform}, PluginPlatforms: []string{platform}}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	files, err := Release(o)
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, f := range files {
		has[filepath.Base(f)] = true
	}

	for _, c := range Components {
		name := c + "_" + version + "_oci.tar"
		if !has[name] {
			t.Errorf("no image archive %s in %v", name, files)
			continue
		}
		dir := t.TempDir()
		untar(t, filepath.Join(out, name), dir, false)
		lp, err := layout.FromPath(dir)
		if err != nil {
			t.Fatal(err)
		}
		top, err := lp.ImageIndex()
		if err != nil {
			t.Fatal(err)
		}
		tm, err := top.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(tm.Manifests) != 1 || tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "0.0.0-test.1" {
			t.Fatalf("%s: index.json %+v, want one index tagged 0.0.0-test.1 (the chart's appVersion)", name, tm.Manifests)
		}
		idx, err := top.ImageIndex(tm.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.OS+"/"+im.Manifests[0].Platform.Architecture != platform {
			t.Fatalf("%s: platforms %+v, want %s", name, im.Manifests, platform)
		}
		img, err := idx.Image(im.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Config.User != "65532:65532" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != Entrypoint || cfg.Config.Labels["org.opencontainers.image.version"] != version {
			t.Errorf("%s: config user %q entrypoint %v labels %v", name, cfg.Config.User, cfg.Config.Entrypoint, cfg.Config.Labels)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: layers %d, %v", name, len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		fsDir := t.TempDir()
		lt := filepath.Join(t.TempDir(), "layer.tar")
		lf, _ := os.Create(lt)
		_, _ = io.Copy(lf, rc)
		lf.Close()
		rc.Close()
		untar(t, lt, fsDir, false)
		got, err := exec.Command(filepath.Join(fsDir, Entrypoint), "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(got), version) {
			t.Errorf("%s: %s --version: %v %s, want %s", name, Entrypoint, err, got, version)
		}
	}

	archive := "kubectl-holdfast_" + version + "_" + strings.ReplaceAll(platform, "/", "_") + ".tar.gz"
	if !has[archive] {
		t.Fatalf("no plugin archive %s in %v", archive, files)
	}
	dir := t.TempDir()
	modes := untar(t, filepath.Join(out, archive), dir, true)
	if len(modes) != 2 || modes["kubectl-holdfast"]&0o111 == 0 || modes["LICENSE"] == 0 {
		t.Errorf("%s holds %v, want an executable kubectl-holdfast and LICENSE", archive, modes)
	}
	if got, err := exec.Command(filepath.Join(dir, "kubectl-holdfast"), "version").CombinedOutput(); err != nil || !strings.Contains(string(got), version) {
		t.Errorf("kubectl holdfast version: %v %s, want %s", err, got, version)
	}
	for n := range has {
		if strings.HasSuffix(n, "_krew.yaml") {
			t.Errorf("%s written for a release of one platform: it names archives that do not exist", n)
		}
	}

	ch, err := loader.Load(filepath.Join(out, "holdfast-0.0.0-test.1.tgz"))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "0.0.0-test.1" || ch.Metadata.AppVersion != "0.0.0-test.1" {
		t.Errorf("chart version %s, appVersion %s", ch.Metadata.Version, ch.Metadata.AppVersion)
	}

	var doc spdxDocument
	data, err := os.ReadFile(filepath.Join(out, "holdfast_"+version+".spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	binaries, modules := 0, map[string]string{}
	for _, p := range doc.Packages {
		if strings.HasPrefix(p.SPDXID, "SPDXRef-Binary-") {
			binaries++
			if len(p.Checksums) != 1 || len(p.Checksums[0].ChecksumValue) != 64 {
				t.Errorf("SBOM binary %s has checksums %v", p.Name, p.Checksums)
			}
		} else {
			modules[p.Name] = p.VersionInfo
		}
	}
	if doc.SPDXVersion != "SPDX-2.3" || binaries != len(Components)+1 {
		t.Errorf("SBOM: %s with %d binaries, want SPDX-2.3 with %d", doc.SPDXVersion, binaries, len(Components)+1)
	}
	for _, m := range []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime", "go.etcd.io/etcd/client/v3", "stdlib"} {
		if modules[m] == "" {
			t.Errorf("SBOM lists no %s", m)
		}
	}

	sums, err := os.Open(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer sums.Close()
	listed := 0
	sc := bufio.NewScanner(sums)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		want, err := fileSum(filepath.Join(out, name))
		if err != nil || want != sum {
			t.Errorf("SHA256SUMS: %s %s, the file's is %s (%v)", name, sum, want, err)
		}
		listed++
	}
	if listed != len(files)-1 {
		t.Errorf("SHA256SUMS lists %d files of %d", listed, len(files)-1)
	}
}

// The krew manifest of a full release names each archive with that
// archive's own sha256.
func TestTheKrewManifestNamesEachArchivesSum(t *testing.T) {
	const version = "v0.2.0"
	out := t.TempDir()
	archives := map[string]string{}
	want := map[string]string{}
	for _, p := range []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64", "windows_amd64"} {
		name := "kubectl-holdfast_" + version + "_" + p + ".tar.gz"
		f := filepath.Join(out, name)
		if err := os.WriteFile(f, []byte("archive of "+p), 0o644); err != nil {
			t.Fatal(err)
		}
		archives[name] = f
		s, err := fileSum(f)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = s
	}
	m, err := krewManifest(Options{Version: version, Out: out}, archives)
	if err != nil || m == "" {
		t.Fatalf("krew manifest %q: %v", m, err)
	}
	data, err := os.ReadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Spec struct {
			Version   string `json:"version"`
			Platforms []struct {
				URI    string `json:"uri"`
				Sha256 string `json:"sha256"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.Version != version || len(p.Spec.Platforms) != len(want) {
		t.Fatalf("version %s with %d platforms", p.Spec.Version, len(p.Spec.Platforms))
	}
	for _, pl := range p.Spec.Platforms {
		name := filepath.Base(pl.URI)
		if want[name] == "" || pl.Sha256 != want[name] {
			t.Errorf("%s: sha256 %s, the archive's is %s", pl.URI, pl.Sha256, want[name])
		}
		if !strings.HasPrefix(pl.URI, "https://github.com/holdfast-io/holdfast/releases/download/"+version+"/") {
			t.Errorf("uri %s", pl.URI)
		}
	}
}

func TestReleaseOptionsNameWhatIsWrong(t *testing.T) {
	ok := Options{Version: "v0.1.0-rc.1", Out: "dist", Platforms: []string{"linux/amd64"}, PluginPlatforms: []string{"darwin/arm64"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mutate func(*Options)
		want   string
	}{
		{func(o *Options) { o.Version = "0.1.0" }, "-version"},
		{func(o *Options) { o.Version = "v0.1" }, "-version"},
		{func(o *Options) { o.Out = "" }, "-out"},
		{func(o *Options) { o.Platforms = []string{"linux"} }, `platform "linux"`},
	} {
		o := ok
		tc.mutate(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", o, err, tc.want)
		}
	}
}
