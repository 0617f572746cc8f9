// Command release builds a holdfast release into one directory (make
// release VERSION=vX.Y.Z): the component binaries for each platform, their
// images as OCI archives (pushed when a registry is named), kubectl-holdfast's
// krew archives and its filled krew manifest, the chart packaged at the
// release's version, an SPDX SBOM of every binary's modules, and SHA256SUMS
// over all of it. It needs no Docker: images are assembled from the static
// binaries with go-containerregistry.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Components are the binaries that ship as images (the chart's and the
// demo's); kubectl-holdfast ships as krew archives.
var Components = []string{"holdfast-controller", "holdfast-webhook", "holdfast-scheduler", "holdfast-node", "unit-runtime", "device-simulator"}

// Plugin is the kubectl plugin's command.
const Plugin = "kubectl-holdfast"

// Options are one release's settings.
type Options struct {
	// Root is the repository.
	Root string
	// Version is the release, vMAJOR.MINOR.PATCH[-PRE].
	Version string
	// Out receives every artifact.
	Out string
	// Platforms of the images (os/arch).
	Platforms []string
	// PluginPlatforms of kubectl-holdfast's archives.
	PluginPlatforms []string
	// Registry, when set, receives every image as <registry>/<component>:<version>.
	Registry string
}

var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// Validate says what is wrong with the options, naming the flag.
func (o Options) Validate() error {
	var errs []string
	if !semver.MatchString(o.Version) {
		errs = append(errs, fmt.Sprintf("-version %q: must be a semantic version with a leading v, e.g. v0.1.0 or v0.1.0-rc.1", o.Version))
	}
	if o.Out == "" {
		errs = append(errs, "-out: must name the directory the release is written to")
	}
	for _, ps := range [][]string{o.Platforms, o.PluginPlatforms} {
		for _, p := range ps {
			if _, _, ok := strings.Cut(p, "/"); !ok {
				errs = append(errs, fmt.Sprintf("platform %q: must be os/arch, e.g. linux/arm64", p))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func main() {
	o := Options{}
	var platforms, pluginPlatforms string
	flag.StringVar(&o.Version, "version", "", "the release, vMAJOR.MINOR.PATCH[-PRE]")
	flag.StringVar(&o.Out, "out", "", "the directory the release is written to (default dist/<version>)")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "the images' platforms")
	flag.StringVar(&pluginPlatforms, "plugin-platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64", "kubectl-holdfast's platforms (the krew manifest names these five)")
	flag.StringVar(&o.Registry, "registry", "", "push every image to <registry>/<component>:<version> (credentials from the Docker config, as crane reads them)")
	flag.Parse()
	o.Platforms, o.PluginPlatforms = split(platforms), split(pluginPlatforms)
	if o.Out == "" && o.Version != "" {
		o.Out = filepath.Join("dist", o.Version)
	}
	root, err := os.Getwd()
	if err == nil {
		o.Root = root
		err = o.Validate()
	}
	if err == nil {
		var files []string
		files, err = Release(o)
		for _, f := range files {
			fmt.Println(f)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
