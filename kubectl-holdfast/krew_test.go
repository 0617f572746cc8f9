package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/holdfast-io/holdfast/kubectl-holdfast/krew"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// krewPlugin is krew's index.Plugin (sigs.k8s.io/krew/pkg/index,
// v1alpha2), field for field: that module pins client-go v11, which would
// drag this module's graph, so its schema is restated here and decoded
// strictly (an unknown or misspelt field fails).
type krewPlugin struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Version          string `json:"version,omitempty"`
		ShortDescription string `json:"shortDescription,omitempty"`
		Description      string `json:"description,omitempty"`
		Caveats          string `json:"caveats,omitempty"`
		Homepage         string `json:"homepage,omitempty"`
		Platforms        []struct {
			URI      string                `json:"uri,omitempty"`
			Sha256   string                `json:"sha256,omitempty"`
			Selector *metav1.LabelSelector `json:"selector,omitempty"`
			Files    []struct {
				From string `json:"from,omitempty"`
				To   string `json:"to,omitempty"`
			} `json:"files"`
			Bin string `json:"bin"`
		} `json:"platforms,omitempty"`
	} `json:"spec"`
}

// The krew manifest, rendered as krew-release-bot renders it, is a krew
// Plugin that installs the binary on every platform it names.
func TestKrewManifestIsAValidPlugin(t *testing.T) {
	const tag = "v0.1.0"
	var uris []string
	out, err := krew.Render(tag, func(uri string) (string, error) {
		uris = append(uris, uri)
		sum := sha256.Sum256([]byte(uri))
		return hex.EncodeToString(sum[:]), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var p krewPlugin
	if err := yaml.UnmarshalStrict(out, &p); err != nil {
		t.Fatalf("the rendered manifest is not a krew Plugin: %v\n%s", err, out)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Name != "holdfast" {
		t.Errorf("header: %s %s %s", p.APIVersion, p.Kind, p.Name)
	}
	// krew's rules: a semver version, a short description under 50 runes.
	if p.Spec.Version != tag || !regexp.MustCompile(`^v\d+\.\d+\.\d+`).MatchString(p.Spec.Version) {
		t.Errorf("version %q", p.Spec.Version)
	}
	if n := len([]rune(p.Spec.ShortDescription)); n == 0 || n > 60 {
		t.Errorf("shortDescription is %d characters", n)
	}
	if !strings.Contains(p.Spec.Description, "Exit codes: 0 accepted, 1 refused") {
		t.Errorf("the description names the exit codes a script relies on")
	}
	seen := map[string]bool{}
	for _, pl := range p.Spec.Platforms {
		sel, err := metav1.LabelSelectorAsSelector(pl.Selector)
		if err != nil {
			t.Fatal(err)
		}
		for _, os := range []string{"linux", "darwin", "windows"} {
			for _, arch := range []string{"amd64", "arm64"} {
				if sel.Matches(labels.Set{"os": os, "arch": arch}) {
					if seen[os+"/"+arch] {
						t.Errorf("%s/%s matched by two platforms", os, arch)
					}
					seen[os+"/"+arch] = true
					if !strings.Contains(pl.URI, "_"+os+"_"+arch+".tar.gz") || !strings.HasPrefix(pl.URI, "https://") {
						t.Errorf("%s/%s downloads %s", os, arch, pl.URI)
					}
				}
			}
		}
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(pl.Sha256) {
			t.Errorf("sha256 %q", pl.Sha256)
		}
		if pl.Bin != pl.Files[0].From || !strings.HasPrefix(pl.Bin, "kubectl-holdfast") {
			t.Errorf("bin %q is not the archive's kubectl-holdfast (%v)", pl.Bin, pl.Files)
		}
	}
	for _, want := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"} {
		if !seen[want] {
			t.Errorf("no platform for %s", want)
		}
	}
	if len(uris) != len(p.Spec.Platforms) {
		t.Errorf("%d URIs for %d platforms", len(uris), len(p.Spec.Platforms))
	}
}
