// Package krew renders kubectl-holdfast's krew plugin manifest
// (holdfast.yaml, in krew-release-bot's template form) for a release.
package krew

import (
	"bytes"
	_ "embed"
	"text/template"
)

// Manifest is holdfast.yaml as krew-release-bot reads it.
//
//go:embed holdfast.yaml
var Manifest []byte

// Render renders the manifest for tag as krew-release-bot does: each
// platform's addURIAndSha becomes the archive's URI and the sha256 that sum
// returns for it.
func Render(tag string, sum func(uri string) (string, error)) ([]byte, error) {
	funcs := template.FuncMap{"addURIAndSha": func(uri, tag string) (string, error) {
		var b bytes.Buffer
		if err := template.Must(template.New("uri").Parse(uri)).Execute(&b, map[string]string{"TagName": tag}); err != nil {
			return "", err
		}
		s, err := sum(b.String())
		if err != nil {
			return "", err
		}
		return "uri: " + b.String() + "\n    sha256: " + s, nil
	}}
	tmpl, err := template.New("krew").Funcs(funcs).Parse(string(Manifest))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, map[string]string{"TagName": tag}); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
