package main

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// The SBOM is SPDX 2.3 JSON: each binary a package (its file's sha256),
// describing the Go modules it was built from as read from the binary's
// own build information, so it lists exactly what shipped.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string         `json:"name"`
	SPDXID           string         `json:"SPDXID"`
	VersionInfo      string         `json:"versionInfo,omitempty"`
	DownloadLocation string         `json:"downloadLocation"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	LicenseConcluded string         `json:"licenseConcluded"`
	LicenseDeclared  string         `json:"licenseDeclared"`
	CopyrightText    string         `json:"copyrightText"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs     []spdxRef      `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(kind, s string) string {
	return "SPDXRef-" + kind + "-" + spdxIDUnsafe.ReplaceAllString(s, "-")
}

// writeSBOM writes the SBOM of binaries (paths <work>/<os>_<arch>/<name>).
func writeSBOM(out, version string, binaries []string) error {
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "holdfast-" + version,
		DocumentNamespace: "https://github.com/holdfast-io/holdfast/releases/" + version + "/sbom",
		CreationInfo:      spdxCreation{Created: time.Now().UTC().Format(time.RFC3339), Creators: []string{"Tool: holdfast-hack-release"}},
	}
	modules := map[string]spdxPackage{}
	for _, bin := range binaries {
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			return fmt.Errorf("SBOM: reading the build information of %s: %w", bin, err)
		}
		sum, err := fileSum(bin)
		if err != nil {
			return err
		}
		platform := filepath.Base(filepath.Dir(bin))
		name := filepath.Base(bin) + " (" + strings.Replace(platform, "_", "/", 1) + ")"
		id := spdxID("Binary", filepath.Base(bin)+"-"+platform)
		doc.Packages = append(doc.Packages, spdxPackage{Name: name, SPDXID: id, VersionInfo: version,
			DownloadLocation: "https://github.com/holdfast-io/holdfast/releases/tag/" + version, LicenseConcluded: "NOASSERTION",
			LicenseDeclared: "Apache-2.0", CopyrightText: "NOASSERTION", Checksums: []spdxChecksum{{"SHA256", sum}}})
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", id})
		deps := append([]*debugModule{{Path: "stdlib", Version: info.GoVersion}, {Path: info.Main.Path, Version: info.Main.Version}}, modulesOf(info)...)
		for _, m := range deps {
			mid := spdxID("Module", m.Path+"-"+m.Version)
			if _, ok := modules[mid]; !ok {
				p := spdxPackage{Name: m.Path, SPDXID: mid, VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
					LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
					ExternalRefs: []spdxRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + m.Path + "@" + m.Version}}}
				modules[mid] = p
			}
			doc.Relationships = append(doc.Relationships, spdxRelationship{id, "DEPENDS_ON", mid})
		}
	}
	ids := make([]string, 0, len(modules))
	for id := range modules {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		doc.Packages = append(doc.Packages, modules[id])
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(b, '\n'), 0o644)
}

type debugModule struct{ Path, Version string }

// modulesOf is the modules a binary was built from, each as replaced.
func modulesOf(info *buildinfo.BuildInfo) []*debugModule {
	var out []*debugModule
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		out = append(out, &debugModule{Path: d.Path, Version: d.Version})
	}
	return out
}
